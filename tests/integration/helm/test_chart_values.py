"""The chart's values: values.schema.json refuses typos and wrong types, each standard knob renders, and the
objects follow the release's namespace."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import versions
from tests.integration.helm.test_chart import CHART, _objects, _template, helm  # noqa: F401

DEPLOYMENT = "Deployment/{ns}/agentsession-operator"


def _refused(helm: Path, *args: str) -> str:  # noqa: F811
    """helm template's error for these arguments (it must fail)."""
    proc = subprocess.run(
        [str(helm), "template", "x", str(CHART), "--kube-version", versions.KUBERNETES, "-n", "ops", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0, f"{args} rendered"
    return proc.stderr


def _pod(rendered: dict[str, dict[str, Any]], ns: str = "agentsession-system") -> dict[str, Any]:
    return rendered[DEPLOYMENT.format(ns=ns)]["spec"]["template"]


def _schema_keys(schema: dict[str, Any], prefix: str = "") -> set[str]:
    out = set()
    for key, sub in schema.get("properties", {}).items():
        out.add(prefix + key)
        out |= _schema_keys(sub, f"{prefix}{key}.")
    return out


def _value_keys(values: dict[str, Any], schema: dict[str, Any], prefix: str = "") -> set[str]:
    """Every key of values.yaml, down to the maps the schema leaves free (labels, selectors)."""
    out = set()
    for key, value in values.items():
        out.add(prefix + key)
        sub = schema.get("properties", {}).get(key, {})
        if isinstance(value, dict) and "properties" in sub:
            out |= _value_keys(value, sub, f"{prefix}{key}.")
    return out


def test_the_schema_covers_every_value_and_closes_every_object() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert _value_keys(values, schema) <= _schema_keys(schema), "values.yaml has keys values.schema.json lacks"

    def closed(node: dict[str, Any], path: str) -> None:
        if "properties" in node:
            assert node.get("additionalProperties") is False, f"{path or 'the top level'}: additionalProperties"
            for key, sub in node["properties"].items():
                closed(sub, f"{path}.{key}".lstrip("."))

    closed(schema, "")


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("replicas=two", "at '/replicas': got string, want integer"),
        ("replica=2", "additional properties 'replica' not allowed"),
        ("image.tga=dev", "additional properties 'tga' not allowed"),
        ("networkPolicy.enabled=yes", "at '/networkPolicy/enabled': got string, want boolean"),
        ("logFormat=text", "at '/logFormat'"),
        ("podSecurityContext.runAsNonroot=true", "additional properties 'runAsNonroot' not allowed"),
        ("podLabels.app\\.kubernetes\\.io/name=other", "at '/podLabels'"),
    ],
)
def test_the_schema_refuses_typos_and_wrong_types(helm: Path, value: str, error: str) -> None:  # noqa: F811
    assert error in _refused(helm, "--set", value)


def test_defaults_pass_restricted_v2_without_a_fixed_user(helm: Path) -> None:  # noqa: F811
    """OpenShift's restricted-v2 assigns the UID and refuses a fixed one; Pod Security "restricted" holds."""
    spec = _pod(_objects(_template(helm)))["spec"]
    pod, container = spec["securityContext"], spec["containers"][0]["securityContext"]
    assert pod == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    for fixed in ("runAsUser", "runAsGroup", "fsGroup"):
        assert fixed not in pod and fixed not in container
    assert container["allowPrivilegeEscalation"] is False and container["capabilities"] == {"drop": ["ALL"]}
    assert container["readOnlyRootFilesystem"] is True and container["runAsNonRoot"] is True
    assert container["seccompProfile"] == {"type": "RuntimeDefault"} and container["privileged"] is False
    for absent in ("nodeSelector", "tolerations", "affinity", "imagePullSecrets", "priorityClassName"):
        assert absent not in spec


def test_each_pod_knob_renders(helm: Path, tmp_path: Path) -> None:  # noqa: F811
    values: dict[str, Any] = {
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "ops", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
        "imagePullSecrets": [{"name": "regcred"}],
        "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 65532, "fsGroup": 65532},
        "securityContext": {"runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
        "podAnnotations": {"example.com/scrape": "yes"},
        "podLabels": {"team": "platform"},
        "priorityClassName": "system-cluster-critical",
    }
    (tmp_path / "values.yaml").write_text(json.dumps(values))
    template = _pod(_objects(_template(helm, "--values", str(tmp_path / "values.yaml"))))
    spec = template["spec"]
    for key in ("nodeSelector", "tolerations", "affinity", "imagePullSecrets", "priorityClassName"):
        assert spec[key] == values[key], key
    # Helm merges maps with the defaults (a key set to null drops one): what was set is there.
    assert spec["securityContext"] == {**values["podSecurityContext"], "seccompProfile": {"type": "RuntimeDefault"}}
    assert spec["containers"][0]["securityContext"].items() >= values["securityContext"].items()
    assert template["metadata"]["annotations"] == {
        "kubectl.kubernetes.io/default-container": "operator",
        "example.com/scrape": "yes",
    }
    assert template["metadata"]["labels"]["team"] == "platform"
    deployment = _objects(_template(helm, "--set", "podLabels.team=platform"))[
        DEPLOYMENT.format(ns="agentsession-system")
    ]
    assert deployment["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "agentsession-operator"}}


def test_service_account_knobs(helm: Path) -> None:  # noqa: F811
    rendered = _objects(_template(helm, "--set", "serviceAccount.annotations.example\\.com/role=op"))
    account = rendered["ServiceAccount/agentsession-system/agentsession-operator"]
    assert account["metadata"]["annotations"] == {"example.com/role": "op"}

    # Your own account: not rendered, and everything that names the operator's names it.
    rendered = _objects(_template(helm, "--set", "serviceAccount.create=false", "--set", "serviceAccount.name=mine"))
    assert not [k for k in rendered if k.startswith("ServiceAccount/")]
    assert _pod(rendered)["spec"]["serviceAccountName"] == "mine"
    bindings = [
        d
        for d in rendered.values()
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
        and d["metadata"]["name"] != "agentsession-router-issuer-reader"  # every authenticated user
    ]
    assert len(bindings) == 5
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "mine", "namespace": "agentsession-system"}]
    pins = json.dumps([d for d in rendered.values() if d["kind"] == "ValidatingAdmissionPolicy"])
    assert "':mine'" in pins and ":agentsession-operator'" not in pins
    assert "system:serviceaccount:agentsession-system:mine" in pins


def test_the_release_namespace_is_honoured(helm: Path) -> None:  # noqa: F811
    rendered = _objects(_template(helm, namespace="team-ops"))
    namespaced = {k: d for k, d in rendered.items() if d["metadata"].get("namespace")}
    # Only agent-sandbox's ConfigMap Role lives elsewhere, by design.
    assert {d["metadata"]["namespace"] for d in namespaced.values()} == {"team-ops", "agent-sandbox-system"}
    assert {k for k, d in namespaced.items() if d["metadata"]["namespace"] == "agent-sandbox-system"} == {
        "Role/agent-sandbox-system/agentsession-operator-agent-sandbox-config",
        "RoleBinding/agent-sandbox-system/agentsession-operator-agent-sandbox-config",
    }
    hook = rendered["ValidatingWebhookConfiguration//agentsession.dev"]["webhooks"][0]
    assert hook["clientConfig"]["service"]["namespace"] == "team-ops"
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["team-ops", "kube-system"]
    assert rendered["ClusterRoleBinding//agentsession-operator"]["subjects"][0]["namespace"] == "team-ops"
    restore = json.dumps([d for d in rendered.values() if d["kind"] == "ValidatingAdmissionPolicy"])
    assert "system:serviceaccount:team-ops:agentsession-operator" in restore
    assert not [k for k in rendered if k.startswith("Namespace/")]  # Helm's (--create-namespace)


def test_namespace_name_and_create_make_another_namespace(helm: Path) -> None:  # noqa: F811
    rendered = _objects(
        _template(helm, "--set", "namespace.name=ops", "--set", "namespace.create=true", namespace="default")
    )
    labels = rendered["Namespace//ops"]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert DEPLOYMENT.format(ns="ops") in rendered
    # The release's own namespace: Helm stores the release there first, so the chart cannot create it.
    assert "--create-namespace" in _refused(helm, "--set", "namespace.create=true")


def test_kube_version_floor(helm: Path) -> None:  # noqa: F811
    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"] == ">=1.30.0-0"
    proc = subprocess.run(
        [str(helm), "template", "x", str(CHART), "--kube-version", "v1.29.9"], capture_output=True, text=True
    )
    assert proc.returncode != 0 and "kubeVersion" in proc.stderr, proc.stderr
