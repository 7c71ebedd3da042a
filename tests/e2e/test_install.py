"""The install manifests (config/) on the local control plane: they apply, they are admitted under Pod
Security "restricted", and their RBAC grants exactly what the operator and the client need."""

from __future__ import annotations

import ast
import copy
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from devcluster.cluster import Cluster
from tests.e2e import install
from tests.e2e.conftest import Kube

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).parents[2]
CONFIG = ROOT / "config"
SAMPLES = CONFIG / "samples"
TEMPLATE_SAMPLE = SAMPLES / "10-sandboxtemplate-python.yaml"
POOL_SAMPLE = SAMPLES / "20-sandboxwarmpool-python.yaml"
OPERATOR_NS = install.OPERATOR_NAMESPACE
RESTRICTED = ("pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest")

SESSIONS = "agentsessions.agentsession.dev"
POLICIES = "agentsessionpolicies.agentsession.dev"
CLAIMS = "sandboxclaims.extensions.agents.x-k8s.io"
SANDBOXES = "sandboxes.agents.x-k8s.io"
POOLS = "sandboxwarmpools.extensions.agents.x-k8s.io"
TEMPLATES = "sandboxtemplates.extensions.agents.x-k8s.io"
WEBHOOKS = "validatingwebhookconfigurations.admissionregistration.k8s.io"


def load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def restricted(kube: Kube, namespace: str) -> str:
    kube.run("label", "namespace", namespace, "--overwrite", *RESTRICTED)
    return namespace


def pod_from_template(name: str, template: dict[str, Any]) -> dict[str, Any]:
    """A bare Pod with a pod template's metadata and spec, as a controller would create it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(template.get("metadata", {}).get("labels") or {})},
        "spec": copy.deepcopy(template["spec"]),
    }


def runnable_here(kube: Kube, template: dict[str, Any]) -> dict[str, Any]:
    """A SandboxTemplate as this cluster can run it: a runtimeClassName the cluster has no RuntimeClass
    for (the kwok node has none; the real node has `gvisor`) is dropped, so its pods run on runc. The API
    server would refuse every such pod ("RuntimeClass ... not found")."""
    pod_spec = template["spec"]["podTemplate"]["spec"]
    wanted = pod_spec.get("runtimeClassName")
    if not wanted or kube.run("get", "runtimeclass", wanted, check=False).returncode == 0:
        return template
    template = copy.deepcopy(template)
    del template["spec"]["podTemplate"]["spec"]["runtimeClassName"]
    return template


def can_i(kube: Kube, kubeconfig: str, verb: str, resource: str, namespace: str | None, sub: str | None) -> bool:
    args = ["auth", "can-i", verb, resource]
    args += [f"--subresource={sub}"] if sub else []
    args += ["-n", namespace] if namespace else ["--all-namespaces"]
    proc = kube.run(*args, check=False, kubeconfig=kubeconfig)
    answer = proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else ""
    assert answer in ("yes", "no"), f"kubectl auth can-i {' '.join(args)}: {proc.stdout!r} {proc.stderr!r}"
    return answer == "yes"


# ---- fixtures ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def crds(kube: Kube) -> None:
    kube.run("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))


@pytest.fixture(scope="module")
def rendered(kube: Kube) -> list[dict[str, Any]]:
    return install.render(kube, CONFIG)


@pytest.fixture(scope="module")
def operator_kubeconfig(kube: Kube, cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    return install.service_account_kubeconfig(kube, cluster, tmp_path_factory.mktemp("operator-rbac"))


@pytest.fixture
def restricted_namespace(kube: Kube, namespace: str) -> Iterator[str]:
    yield restricted(kube, namespace)


# ---- config/ ----------------------------------------------------------------------------------
def test_config_installs_the_generated_crds(kube: Kube) -> None:
    """config/ takes the CRDs from crds/ itself (through crds/Kustomization): one copy, no drift."""
    rendered = kube.run("kustomize", str(CONFIG)).stdout
    listed = (ROOT / "crds" / "Kustomization").read_text()
    for path in (ROOT / "crds").glob("*.yaml"):
        assert path.name in listed, f"crds/Kustomization does not list {path.name}"
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        assert f"name: {name}" in rendered


def test_config_applies_with_server_dry_run(kube: Kube, crds: None, operator_kubeconfig: str) -> None:
    # The namespace exists (service_account_kubeconfig applied it): a dry run creates nothing, so
    # without it every object inside it would be refused as NotFound.
    # The shared host-process operator's webhook configuration of the same name holds a URL (its own):
    # applying config/'s (a Service) over it would ask for both. Dry-run config/'s under another name.
    # The same for the write pins the fixture applied client-side (a server-side apply over the API server's
    # defaults in them conflicts with that manager): dry-run config/'s under other names.
    docs = install.render(kube, CONFIG)
    for doc in docs:
        if doc["kind"] == "ValidatingWebhookConfiguration":
            doc["metadata"]["name"] = "dry-run.agentsession.dev"
        if doc["kind"] == "ValidatingAdmissionPolicy":
            doc["metadata"]["name"] = f"dry-run-{doc['metadata']['name']}"
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            doc["metadata"]["name"] = f"dry-run-{doc['metadata']['name']}"
            doc["spec"]["policyName"] = f"dry-run-{doc['spec']['policyName']}"
    manifest = yaml.safe_dump_all(docs)
    for mode in ([], ["--server-side"]):
        proc = kube.run("apply", "--dry-run=server", *mode, "-f", "-", input=manifest)
        assert "deployment.apps/agentsession-operator" in proc.stdout
        assert "service/agentsession-operator" in proc.stdout
        assert "PodSecurity" not in proc.stderr, proc.stderr


def test_config_objects(rendered: list[dict[str, Any]]) -> None:
    kinds = sorted((d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) for d in rendered)
    assert kinds == sorted(
        [
            ("Namespace", OPERATOR_NS, None),
            ("CustomResourceDefinition", SESSIONS, None),
            ("CustomResourceDefinition", POLICIES, None),
            ("ServiceAccount", "agentsession-operator", OPERATOR_NS),
            ("ClusterRole", "agentsession-operator", None),
            ("ClusterRoleBinding", "agentsession-operator", None),
            # kustomize's namespace must not have moved these next to the operator.
            ("Role", "agentsession-operator-agent-sandbox-config", "agent-sandbox-system"),
            ("RoleBinding", "agentsession-operator-agent-sandbox-config", "agent-sandbox-system"),
            ("Role", "agentsession-operator-leader-election", OPERATOR_NS),
            ("RoleBinding", "agentsession-operator-leader-election", OPERATOR_NS),
            ("Role", "agentsession-operator-webhook-certificate", OPERATOR_NS),
            ("RoleBinding", "agentsession-operator-webhook-certificate", OPERATOR_NS),
            ("Secret", "agentsession-webhook-cert", OPERATOR_NS),
            # The router credential issuer's published address (issue 51 item 2), and who may patch and read it.
            ("ConfigMap", "agentsession-router-issuer", OPERATOR_NS),
            ("Role", "agentsession-operator-router-issuer", OPERATOR_NS),
            ("RoleBinding", "agentsession-operator-router-issuer", OPERATOR_NS),
            ("Role", "agentsession-router-issuer-reader", OPERATOR_NS),
            ("RoleBinding", "agentsession-router-issuer-reader", OPERATOR_NS),
            ("ValidatingWebhookConfiguration", "agentsession.dev", None),
            # Cluster-scoped, but kustomize's namespace transformer does not know these kinds: it sets the
            # namespace, which the API server ignores for them.
            *(
                (kind, f"agentsession-operator-{what}-writes", OPERATOR_NS)
                for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
                for what in ("sandbox", "webhook", "network-policy", "claim")
            ),
            *(
                (kind, f"agentsession-operator-{what}", OPERATOR_NS)
                for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
                for what in ("session-deletes", "claim-creates")
            ),
            # Who may name a checkpoint image (issue 33): config/admission/restore_annotation.yaml.
            *(
                (kind, f"agentsession-restore-annotation-{what}", OPERATOR_NS)
                for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
                for what in ("templates", "claims", "sandboxes", "pods")
            ),
            ("PodDisruptionBudget", "agentsession-operator", OPERATOR_NS),
            ("Service", "agentsession-operator", OPERATOR_NS),
            ("Deployment", "agentsession-operator", OPERATOR_NS),
            ("NetworkPolicy", "agentsession-operator", OPERATOR_NS),
        ]
    )
    ns = by_kind(rendered, "Namespace")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"

    deploy = by_kind(rendered, "Deployment")
    spec = deploy["spec"]
    # A leader and a hot standby sharing one webhook certificate; a rollout keeps one serving admission.
    assert spec["replicas"] == 2 and spec["strategy"]["type"] == "RollingUpdate"
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "agentsession-operator" and pod["automountServiceAccountToken"] is True
    (container,) = pod["containers"]
    assert container["image"] == "ghcr.io/agentsession/operator:0.1.0"
    assert {"--metrics-port=8080", "--health-port=8081", "--webhook-port=9443"} <= set(container["args"])
    assert "--webhook-service=$(POD_NAMESPACE)/agentsession-operator" in container["args"]
    assert {"name": "LOG_FORMAT", "value": "json"} in container["env"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081, "webhook": 9443}
    for probe in ("livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["tcpSocket"] == {"port": "webhook"}
    sc = container["securityContext"]
    # No fixed user (the image's USER 65532, or the one OpenShift's restricted-v2 assigns: it refuses a fixed one).
    assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and not {"runAsUser", "runAsGroup"} & set(sc)
    assert not {"runAsUser", "runAsGroup", "fsGroup"} & set(pod["securityContext"]), pod["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "768Mi"}

    svc = by_kind(rendered, "Service")
    assert svc["spec"]["selector"] == spec["selector"]["matchLabels"]
    svc_ports = {p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]}
    assert svc_ports == {"metrics": (8080, "metrics"), "webhook": (443, "webhook")}


def test_deployment_args_are_the_operators_flags(rendered: list[dict[str, Any]]) -> None:
    """The operator's own argument parser accepts the Deployment's args (as the kubelet expands them)."""
    from agentsession_operator.cli import parse_args

    (container,) = by_kind(rendered, "Deployment")["spec"]["template"]["spec"]["containers"]
    args = parse_args([a.replace("$(POD_NAMESPACE)", OPERATOR_NS) for a in container["args"]])
    assert (args.metrics_port, args.health_port, args.bind) == (8080, 8081, "0.0.0.0")
    assert args.webhook_port == 9443 and args.webhook_service == f"{OPERATOR_NS}/agentsession-operator"
    assert args.webhook_cert_secret == f"{OPERATOR_NS}/agentsession-webhook-cert" and args.webhook_cert_generate
    assert args.webhook_configuration == "agentsession.dev"
    assert args.log_format == "json" and not args.namespace  # cluster-wide


def test_cluster_role_is_least_privilege(rendered: list[dict[str, Any]]) -> None:
    rules = by_kind(rendered, "ClusterRole")["rules"]
    for rule in rules:
        for key in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule[key], f"wildcard in {rule}"
        assert not {"secrets", "pods", "pods/exec", "leases", "configmaps"} & set(rule["resources"]), rule
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
    session_verbs = {v for r in rules if "agentsessions" in r["resources"] for v in r["verbs"]}
    assert session_verbs == {"get", "list", "watch", "delete"}  # status only: never the spec


def test_operator_pod_is_admitted_under_restricted(
    kube: Kube, rendered: list[dict[str, Any]], operator_kubeconfig: str
) -> None:
    """agentsession-system enforces restricted: the operator's pod passes, a careless pod does not."""
    template = by_kind(rendered, "Deployment")["spec"]["template"]
    pod = pod_from_template("operator-admission-check", template)
    kube.run("create", "--dry-run=server", "-n", OPERATOR_NS, "-f", "-", input=yaml.safe_dump(pod))
    careless = copy.deepcopy(pod)
    careless["spec"].pop("securityContext")
    careless["spec"]["containers"][0].pop("securityContext")
    proc = kube.run(
        "create", "--dry-run=server", "-n", OPERATOR_NS, "-f", "-", input=yaml.safe_dump(careless), check=False
    )
    assert proc.returncode != 0 and "violates PodSecurity" in proc.stderr, proc.stderr


# ---- config/samples/ --------------------------------------------------------------------------
def test_samples_apply_with_server_dry_run(kube: Kube, crds: None, restricted_namespace: str) -> None:
    proc = kube.run("apply", "--dry-run=server", "-n", restricted_namespace, "-f", str(SAMPLES))
    for kind in ("sandboxtemplate", "sandboxwarmpool", "agentsessionpolicy", "agentsession"):
        assert f"{kind}." in proc.stdout, proc.stdout
    assert "PodSecurity" not in proc.stderr, proc.stderr
    assert (SAMPLES / "SECRETS.md").is_file()


def test_sample_session_complies_with_the_sample_policy() -> None:
    """The operator's own rules (admission and reconcile share them): the sample session passes the
    sample policy, and the policy's env.deny refuses the usual names of credentials."""
    from agentsession_operator.admission import rules as admission
    from agentsession_operator.decisions import policy

    (pol,) = load(SAMPLES / "30-agentsessionpolicy.yaml")
    (session,) = load(SAMPLES / "40-agentsession.yaml")
    for obj in (pol, session):
        obj["metadata"]["namespace"] = "demo"
    assert policy.policy_errors(pol) == []
    assert admission.review(session, [pol], ["sandbox.users.io"], [], "CREATE") == []
    for name in ("AWS_ACCESS_KEY_ID", "GITHUB_TOKEN", "DB_PASSWORD", "OPENAI_API_KEY", "CLIENT_SECRET_VALUE"):
        leaky = copy.deepcopy(session)
        leaky["spec"]["env"].append({"name": name, "value": "x"})
        refused = admission.review(leaky, [pol], ["sandbox.users.io"], [], "CREATE")
        assert any(name in reason for reason in refused), (name, refused)


@pytest.mark.node  # the hardened pod started by a real kubelet
def test_hardened_template_pod_is_admitted_and_ready(kube: Kube, restricted_namespace: str) -> None:
    """The template's pod spec, as a real Pod in a namespace enforcing restricted: admitted, Ready,
    and the runtime works with its read-only root (commands and files live in /workspace)."""
    ns = restricted_namespace
    template = runnable_here(kube, by_kind(load(TEMPLATE_SAMPLE), "SandboxTemplate"))
    pod = pod_from_template("hardened", template["spec"]["podTemplate"])
    kube.apply(pod, namespace=ns)
    ready = kube.wait_for(
        "hardened pod Ready", lambda: (p := kube.get("pod", "hardened", ns)) and kube.is_true(p, "Ready") and p
    )
    ip = ready["status"]["podIP"]
    out = httpx.post(
        f"http://{ip}:8888/execute",
        json={"command": "sh -c 'pwd; id -u; echo ok > probe.txt && cat probe.txt; echo $HOME'"},
        timeout=30,
    ).json()
    assert out["exit_code"] == 0, out
    assert out["stdout"].split() == ["/workspace", "1000", "ok", "/tmp"]

    careless = pod_from_template("careless", template["spec"]["podTemplate"])
    careless["spec"]["containers"][0]["securityContext"].pop("capabilities")
    proc = kube.run("create", "-n", ns, "-f", "-", input=yaml.safe_dump(careless), check=False)
    assert proc.returncode != 0 and "violates PodSecurity" in proc.stderr, proc.stderr


@pytest.mark.node
def test_hardened_template_warm_pool_gets_ready_sandboxes(kube: Kube, restricted_namespace: str) -> None:
    """agent-sandbox accepts the template, its pods pass restricted, and it manages our NetworkPolicy."""
    ns = restricted_namespace
    template = runnable_here(kube, by_kind(load(TEMPLATE_SAMPLE), "SandboxTemplate"))
    pool = by_kind(load(POOL_SAMPLE), "SandboxWarmPool")
    pool["spec"]["replicas"] = 1  # one is proof enough
    kube.apply(template, pool, namespace=ns)
    sandbox = kube.wait_for(
        "a Ready pool sandbox",
        lambda: next((s for s in kube.list(SANDBOXES, ns) if kube.is_true(s, "Ready")), None),
        timeout=90,
    )
    pod = kube.get("pod", sandbox["metadata"]["name"], ns)
    assert pod is not None and pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["dnsPolicy"] == "ClusterFirst"
    policies = kube.wait_for("the template's NetworkPolicy", lambda: kube.list("networkpolicies", ns))
    (policy,) = policies
    assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    # Closed both ways: only each session's own NetworkPolicy (the operator's) opens anything.
    assert template["spec"]["networkPolicy"] == {}
    assert not policy["spec"].get("ingress") and not policy["spec"].get("egress"), policy["spec"]


# ---- RBAC, as the API server decides it -------------------------------------------------------
# (verb, resource, subresource, namespace: "TEST" = a test namespace, None = all namespaces)
OPERATOR_ALLOWED = [
    ("list", SESSIONS, None, None),
    ("watch", SESSIONS, None, None),
    ("get", SESSIONS, None, "TEST"),
    ("delete", SESSIONS, None, "TEST"),
    ("patch", SESSIONS, "status", "TEST"),
    ("update", SESSIONS, "status", "TEST"),
    ("watch", POLICIES, None, None),
    ("patch", POLICIES, "status", "TEST"),
    ("create", CLAIMS, None, "TEST"),
    ("patch", CLAIMS, None, "TEST"),
    ("delete", CLAIMS, None, "TEST"),
    ("watch", CLAIMS, None, None),
    ("patch", SANDBOXES, None, "TEST"),
    ("watch", SANDBOXES, None, None),
    ("watch", POOLS, None, None),
    # Each session's own NetworkPolicy (garbage collection deletes it with the session).
    ("create", "networkpolicies.networking.k8s.io", None, "TEST"),
    ("update", "networkpolicies.networking.k8s.io", None, "TEST"),
    ("watch", "networkpolicies.networking.k8s.io", None, None),
    ("create", "events", None, "TEST"),
    ("create", "events.events.k8s.io", None, "TEST"),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io", None, None),
    ("watch", "namespaces", None, None),
    ("get", "configmaps/agent-sandbox-config", None, "agent-sandbox-system"),
    # A fork reads its source's PVCs and their StorageClasses.
    ("get", "persistentvolumeclaims", None, "TEST"),
    ("get", "storageclasses.storage.k8s.io", None, None),
    ("get", f"{WEBHOOKS}/agentsession.dev", None, None),
    ("patch", f"{WEBHOOKS}/agentsession.dev", None, None),
    # The webhook's certificate: one Secret, shipped empty, filled once by the operator.
    ("get", "secrets/agentsession-webhook-cert", None, "agentsession-system"),
    ("patch", "secrets/agentsession-webhook-cert", None, "agentsession-system"),
    # Leader election: its one Lease, in its own namespace.
    ("create", "leases.coordination.k8s.io", None, "agentsession-system"),
    ("get", "leases.coordination.k8s.io/agentsession-operator", None, "agentsession-system"),
    ("update", "leases.coordination.k8s.io/agentsession-operator", None, "agentsession-system"),
]
OPERATOR_DENIED = [
    ("get", "secrets", None, "TEST"),
    ("list", "secrets", None, None),
    ("create", "pods", "exec", "TEST"),
    ("get", "pods", None, "TEST"),
    ("create", "pods", None, "TEST"),
    ("patch", SESSIONS, None, "TEST"),  # the spec belongs to GitOps
    ("update", SESSIONS, None, "TEST"),
    ("create", SESSIONS, None, "TEST"),
    ("update", SANDBOXES, None, "TEST"),
    ("delete", SANDBOXES, None, "TEST"),
    ("patch", POOLS, None, "TEST"),
    ("create", TEMPLATES, None, "TEST"),
    ("get", "configmaps", None, "TEST"),
    ("get", "configmaps/agent-sandbox-config", None, "TEST"),
    ("get", "configmaps/other", None, "agent-sandbox-system"),
    ("list", "configmaps", None, "agent-sandbox-system"),
    ("create", "leases.coordination.k8s.io", None, "TEST"),
    ("update", "leases.coordination.k8s.io/someone-elses", None, "agentsession-system"),
    ("delete", "leases.coordination.k8s.io/agentsession-operator", None, "agentsession-system"),
    ("patch", f"{WEBHOOKS}/someone-elses", None, None),
    ("delete", WEBHOOKS, None, None),
    # Item 11: creating a webhook configuration cannot be limited by name (a compromised operator could
    # register a cluster-wide mutating webhook): the configuration is shipped instead.
    ("create", WEBHOOKS, None, None),
    ("create", "mutatingwebhookconfigurations.admissionregistration.k8s.io", None, None),
    ("patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io/agentsession.dev", None, None),
    ("list", WEBHOOKS, None, None),
    ("get", "secrets/other", None, "agentsession-system"),
    ("create", "secrets", None, "agentsession-system"),
    ("list", "secrets", None, "agentsession-system"),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", None, None),
    ("create", "persistentvolumeclaims", None, "TEST"),  # agent-sandbox makes the fork's PVCs
    ("delete", "persistentvolumeclaims", None, "TEST"),
    ("patch", "storageclasses.storage.k8s.io", None, None),
    ("delete", "networkpolicies.networking.k8s.io", None, "TEST"),
]


def _ids(cases: list[tuple[str, str, str | None, str | None]]) -> list[str]:
    return [f"{v}-{r.split('.')[0]}{'/' + s if s else ''}-{n or 'all'}" for v, r, s, n in cases]


@pytest.mark.parametrize(("verb", "resource", "sub", "ns"), OPERATOR_ALLOWED, ids=_ids(OPERATOR_ALLOWED))
def test_operator_can(
    kube: Kube, operator_kubeconfig: str, namespace: str, verb: str, resource: str, sub: str | None, ns: str | None
) -> None:
    assert can_i(kube, operator_kubeconfig, verb, resource, namespace if ns == "TEST" else ns, sub)


@pytest.mark.parametrize(("verb", "resource", "sub", "ns"), OPERATOR_DENIED, ids=_ids(OPERATOR_DENIED))
def test_operator_cannot(
    kube: Kube, operator_kubeconfig: str, namespace: str, verb: str, resource: str, sub: str | None, ns: str | None
) -> None:
    assert not can_i(kube, operator_kubeconfig, verb, resource, namespace if ns == "TEST" else ns, sub)


def test_operator_token_reaches_the_api(kube: Kube, operator_kubeconfig: str, crds: None) -> None:
    """Not just an access review: the operator's token lists sessions and reads agent-sandbox's CRD."""
    kube.run("get", SESSIONS, "--all-namespaces", kubeconfig=operator_kubeconfig)
    kube.run("get", "crd", CLAIMS, kubeconfig=operator_kubeconfig)
    proc = kube.run("get", "secrets", "-n", OPERATOR_NS, check=False, kubeconfig=operator_kubeconfig)
    assert proc.returncode != 0 and "Forbidden" in proc.stderr


CLIENT_ALLOWED: list[tuple[str, str, str | None]] = [
    (verb, SESSIONS, None) for verb in ("get", "list", "watch", "create", "patch", "delete")
]
CLIENT_DENIED: list[tuple[str, str, str | None]] = [
    ("get", CLAIMS, None),
    ("create", CLAIMS, None),
    ("get", SANDBOXES, None),
    ("get", "pods", None),
    ("create", "pods", "exec"),
    ("create", "pods", "portforward"),
    ("get", "secrets", None),
    ("patch", SESSIONS, "status"),
    ("create", POLICIES, None),
]


def test_client_role(kube: Kube, cluster: Cluster, namespace: str, tmp_path: Path, crds: None) -> None:
    config = install.client_kubeconfig(kube, cluster, namespace, tmp_path)
    wrong = [c for c in CLIENT_ALLOWED if not can_i(kube, config, c[0], c[1], namespace, c[2])]
    wrong += [c for c in CLIENT_DENIED if can_i(kube, config, c[0], c[1], namespace, c[2])]
    # Only its own namespace.
    wrong += [("create", SESSIONS, "default")] if can_i(kube, config, "create", SESSIONS, "default", None) else []
    assert wrong == []
    # And for real: the client creates a session with its own token.
    session = {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": "from-client"},
        "spec": {"warmPoolRef": {"name": "python-pool"}, "ttl": "10m"},
    }
    kube.apply(session, namespace=namespace, kubeconfig=config)
    kube.run("delete", SESSIONS, "from-client", "-n", namespace, "--wait=false", kubeconfig=config)


def test_client_port_forward_extra_role(kube: Kube, cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    config = install.client_kubeconfig(kube, cluster, namespace, tmp_path, port_forward=True)
    assert can_i(kube, config, "create", "pods", namespace, "portforward")
    assert can_i(kube, config, "get", "pods", namespace, None)
    assert can_i(kube, config, "list", "pods", namespace, None)
    assert not can_i(kube, config, "create", "pods", namespace, "exec")
    assert not can_i(kube, config, "get", "secrets", namespace, None)


# ---- operator/Dockerfile -------------------------------------------------------------------
def _dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.parametrize("project", ["operator", "nodeagent"])
def test_image_dependencies_cover_the_operators_imports(project: str) -> None:
    """The image installs the operator's and the node agent's distributions (and the API package they depend
    on), not the client's: every third-party module each imports must come from its own dependencies."""
    listed: set[str] = set()
    for folder in (project, "api"):
        deps = tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]["dependencies"]
        listed |= {_dist(re.split(r"[<>=!~ \[;]", req, maxsplit=1)[0]) for req in deps}
    modules: set[str] = set()
    for package in (f"{project}/agentsession_{project}", "api/agentsession_api"):
        for path in (ROOT / package).rglob("*.py"):
            if path.name in ("crdgen.py", "apidoc.py"):  # make crds only (the codegen extra)
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    modules |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules.add(node.module.split(".")[0])
    modules -= set(sys.stdlib_module_names) | {f"agentsession_{project}", "agentsession_api", "__future__"}
    owners = importlib.metadata.packages_distributions()
    missing = {m: owners.get(m) for m in sorted(modules) if not {_dist(d) for d in owners.get(m) or [m]} & listed}
    assert missing == {}, f"imported by {project} but not among its dependencies: {missing}"


def test_build_context_is_the_images_distributions_only() -> None:
    """The image builds from the repository root: the root .dockerignore (read by docker and buildah)
    lets in only api/, operator/ and nodeagent/ (the distributions the image installs), so .cluster/ (the dev
    cluster's keys) and .venv/ never go out."""
    assert not (ROOT / "operator" / ".dockerignore").exists()  # would have no effect there
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    rules = [line for line in lines if line and not line.startswith("#")]
    assert rules[0] == "*"
    assert {rule for rule in rules if rule.startswith("!")} == {"!api/", "!operator/", "!nodeagent/"}
    text = (ROOT / "operator" / "Dockerfile").read_text()
    assert "tomllib" not in text and "--no-deps" not in text
    assert "pip wheel --wheel-dir /wheels ./api ./operator ./nodeagent" in text


def test_dockerfile_shape() -> None:
    text = (ROOT / "operator" / "Dockerfile").read_text()
    assert text.count("\nFROM ") == 2  # builder + runtime
    assert "USER 65532:65532" in text
    assert 'ENTRYPOINT ["python", "-m", "agentsession_operator"]' in text


# ---- kind/ ------------------------------------------------------------------------------------
@pytest.mark.parametrize("script", ["up.sh", "down.sh"])
def test_kind_scripts_parse(script: str) -> None:
    path = ROOT / "kind" / script
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "set -euo pipefail" in path.read_text()


def test_kind_cluster_config() -> None:
    (config,) = load(ROOT / "kind" / "cluster.yaml")
    assert config["kind"] == "Cluster" and config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert any(node["role"] == "control-plane" for node in config["nodes"])
