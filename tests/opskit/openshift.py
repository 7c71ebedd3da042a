"""OpenShift's `restricted-v2` SCC, played by admission policies for one namespace (issues 27 and 52).

OpenShift gives every Pod of a namespace a UID and an fsGroup from the namespace's range (no group: GID 0)
when it asks for none, and refuses what the SCC does not allow: privileged containers, privilege escalation,
added capabilities other than NET_BIND_SERVICE, host namespaces and ports, hostPath and other node volumes,
ids outside the range, a seccomp profile other than the runtime's default. A MutatingAdmissionPolicy assigns
the ids; a ValidatingAdmissionPolicy refuses the rest, each rule with its own message. Both are
admissionregistration v1 and bound to one namespace by name.
"""

from __future__ import annotations

from typing import Any

UID = 1000680000
"""Where an OpenShift namespace's openshift.io/sa.scc.uid-range would start."""
UID_RANGE = (UID, UID + 9999)
ADMISSION = "admissionregistration.k8s.io/v1"
_PODS = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}
_VOLUMES = ("configMap", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret", "csi")


def _binding(kind: str, name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    selector = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
    return {
        "apiVersion": ADMISSION,
        "kind": f"{kind}Binding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "matchResources": selector, **spec},
    }


def assign_ids(name: str, namespace: str) -> list[dict[str, Any]]:
    """A Pod of `namespace` that names no user gets the range's UID and fsGroup, and no group (GID 0)."""
    ids = f"runAsUser: {UID}, fsGroup: {UID}"
    expression = "Object{spec: Object.spec{securityContext: Object.spec.securityContext{" + ids + "}}}"
    unset = "!has(object.spec.securityContext) || !has(object.spec.securityContext.runAsUser)"
    policy = {
        "apiVersion": ADMISSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {"resourceRules": [{**_PODS, "operations": ["CREATE"]}]},
            "matchConditions": [{"name": "names-no-user", "expression": unset}],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}],
        },
    }
    return [policy, _binding("MutatingAdmissionPolicy", name, namespace)]


def _in_range(field: str) -> str:
    low, high = UID_RANGE
    return f"({field} >= {low} && {field} <= {high})"


def _unset_or(obj: str, field: str, condition: str) -> str:
    return f"(!has({obj}.securityContext) || !has({obj}.securityContext.{field}) || {condition})"


RULES: tuple[tuple[str, str], ...] = (
    (
        "variables.containers.all(c, " + _unset_or("c", "privileged", "!c.securityContext.privileged") + ")",
        "restricted-v2: privileged containers are not allowed",
    ),
    (
        "variables.containers.all(c, "
        + _unset_or("c", "allowPrivilegeEscalation", "!c.securityContext.allowPrivilegeEscalation")
        + ")",
        "restricted-v2: allowPrivilegeEscalation must be false",
    ),
    (
        "variables.containers.all(c, "
        + _unset_or(
            "c",
            "capabilities",
            "!has(c.securityContext.capabilities.add) || "
            "c.securityContext.capabilities.add.all(a, a == 'NET_BIND_SERVICE')",
        )
        + ")",
        "restricted-v2: only NET_BIND_SERVICE may be added to capabilities",
    ),
    (
        "!(has(object.spec.hostNetwork) && object.spec.hostNetwork) && !(has(object.spec.hostPID) && "
        "object.spec.hostPID) && !(has(object.spec.hostIPC) && object.spec.hostIPC)",
        "restricted-v2: host network, PID and IPC namespaces are not allowed",
    ),
    (
        "variables.containers.all(c, !has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0))",
        "restricted-v2: host ports are not allowed",
    ),
    (
        "!has(object.spec.volumes) || object.spec.volumes.all(v, "
        + " || ".join(f"has(v.{kind})" for kind in _VOLUMES)
        + ")",
        "restricted-v2: only configMap, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected, "
        "secret and csi volumes are allowed (no hostPath)",
    ),
    (
        _unset_or("object.spec", "runAsUser", _in_range("object.spec.securityContext.runAsUser"))
        + " && variables.containers.all(c, "
        + _unset_or("c", "runAsUser", _in_range("c.securityContext.runAsUser"))
        + ")",
        f"restricted-v2: runAsUser must be in the namespace's range {UID_RANGE[0]}-{UID_RANGE[1]}",
    ),
    (
        _unset_or("object.spec", "fsGroup", _in_range("object.spec.securityContext.fsGroup"))
        + " && "
        + _unset_or(
            "object.spec",
            "supplementalGroups",
            "object.spec.securityContext.supplementalGroups.all(g, " + _in_range("g") + ")",
        ),
        f"restricted-v2: fsGroup and supplementalGroups must be in the namespace's range {UID_RANGE[0]}-{UID_RANGE[1]}",
    ),
    (
        _unset_or(
            "object.spec", "seccompProfile", "object.spec.securityContext.seccompProfile.type == 'RuntimeDefault'"
        )
        + " && variables.containers.all(c, "
        + _unset_or("c", "seccompProfile", "c.securityContext.seccompProfile.type == 'RuntimeDefault'")
        + ")",
        "restricted-v2: the seccomp profile must be RuntimeDefault",
    ),
)
"""(CEL that must hold, the refusal's message): restricted-v2's rules that a Pod spec can break."""


def refuse_the_rest(name: str, namespace: str) -> list[dict[str, Any]]:
    """What restricted-v2 refuses, refused for every Pod created or updated in `namespace`."""
    containers = "object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])"
    policy = {
        "apiVersion": ADMISSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {"resourceRules": [_PODS]},
            "failurePolicy": "Fail",
            "variables": [{"name": "containers", "expression": containers}],
            "validations": [{"expression": rule, "message": message} for rule, message in RULES],
        },
    }
    return [policy, _binding("ValidatingAdmissionPolicy", name, namespace, validationActions=["Deny"])]


def restricted_v2(name: str, namespace: str) -> list[dict[str, Any]]:
    """Both policies and their bindings (apply in this order; delete in reverse)."""
    return assign_ids(f"{name}-ids", namespace) + refuse_the_rest(f"{name}-rules", namespace)
