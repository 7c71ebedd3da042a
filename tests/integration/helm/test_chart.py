"""charts/agentsession with default values renders the objects of `kubectl kustomize config/`.

Generic on purpose: every object of config/ must appear in the chart, and every field of it must be
equal after normalising (Helm's own labels removed), unless the difference is in ALLOWED below with
its reason. Objects the chart adds must be in EXTRA, objects it leaves to Helm in CONFIG_ONLY. It renders
for config/'s namespace (`-n agentsession-system`): the chart follows the release's. When config/ changes
(a NetworkPolicy, webhook configurations, RBAC by resourceNames), this test names each object and field the
chart lacks.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import build, versions

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "agentsession"

# Labels Helm charts carry by convention; config/ has no equivalent.
HELM_LABELS = ("app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "helm.sh/chart")

# (object glob "Kind/namespace/name", field-path glob): intended differences, each with its reason.
ALLOWED: dict[tuple[str, str], str] = {
    # Helm installs crds/ verbatim (never templated), so kustomize's common label is not on them.
    ("CustomResourceDefinition/*", "metadata.labels.app.kubernetes.io/part-of"): "Helm does not template crds/",
}

# Objects only the chart renders (glob on "Kind/namespace/name") and why.
EXTRA: dict[str, str] = {}

# Objects only config/ has (glob on "Kind/namespace/name") and why.
CONFIG_ONLY: dict[str, str] = {
    # The chart installs into the release's namespace, where Helm keeps the release before it creates any
    # object: `helm install --create-namespace` makes it (namespace.create makes only another one).
    "Namespace//agentsession-system": "the release's namespace is Helm's to create",
}

# The namespace the chart is rendered for: config/'s.
NAMESPACE = "agentsession-system"


# Cluster-scoped kinds kustomize's namespace transformer does not know as such: it gives them the
# namespace, which the API server ignores for a cluster-scoped object.
KUSTOMIZE_NAMESPACES_THESE = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def _objects(text: str) -> dict[str, dict[str, Any]]:
    out = {}
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        meta = doc["metadata"]
        if doc["kind"] in KUSTOMIZE_NAMESPACES_THESE:
            meta.pop("namespace", None)
        out[f"{doc['kind']}/{meta.get('namespace', '')}/{meta['name']}"] = doc
    return out


def _normalise(doc: dict[str, Any]) -> dict[str, Any]:
    for meta in (doc.get("metadata"), ((doc.get("spec") or {}).get("template") or {}).get("metadata")):
        labels = (meta or {}).get("labels")
        if labels is not None:
            for key in HELM_LABELS:
                labels.pop(key, None)
    return doc


def _flatten(value: Any, path: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        if not value:
            return {path: {}}
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{path}.{key}" if path else str(key)))
        return out
    if isinstance(value, list):
        if not value:
            return {path: []}
        out = {}
        for index, item in enumerate(value):
            out.update(_flatten(item, f"{path}[{index}]"))
        return out
    return {path: value}


def _allowed(key: str, path: str) -> bool:
    return any(fnmatch.fnmatchcase(key, o) and fnmatch.fnmatchcase(path, p) for o, p in ALLOWED)


def differences(config: dict[str, dict[str, Any]], chart: dict[str, dict[str, Any]]) -> list[str]:
    """Every difference not in ALLOWED or EXTRA, one line each."""
    found = []
    for key, want in config.items():
        if key not in chart:
            if not any(fnmatch.fnmatchcase(key, g) for g in CONFIG_ONLY):
                found.append(f"{key}: in config/, not in the chart")
            continue
        a, b = _flatten(_normalise(want)), _flatten(_normalise(chart[key]))
        for path in sorted(set(a) | set(b)):
            if a.get(path, "<absent>") != b.get(path, "<absent>") and not _allowed(key, path):
                found.append(f"{key}: {path}: config/ {a.get(path, '<absent>')!r}, chart {b.get(path, '<absent>')!r}")
    for key in chart:
        if key not in config and not any(fnmatch.fnmatchcase(key, g) for g in EXTRA):
            found.append(f"{key}: only in the chart")
    return found


@pytest.fixture(scope="module")
def helm() -> Path:
    build.build(build.HELM)  # cached after the first time
    return build.HELM.path("helm")


def _template(helm: Path, *args: str, namespace: str = NAMESPACE) -> str:
    proc = subprocess.run(
        [
            str(helm),
            "template",
            "agentsession",
            str(CHART),
            "--include-crds",
            "--kube-version",
            versions.KUBERNETES,
            "--namespace",
            namespace,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _kustomize(directory: Path = ROOT / "config") -> str:
    build.build(build.KUBERNETES)
    kubectl = build.KUBERNETES.path("kubectl")
    proc = subprocess.run([str(kubectl), "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _kustomize_with(tmp_path: Path, component: str) -> str:
    """config/ with one of its components, as the component's kustomization.yaml says to include it."""
    config = os.path.relpath(ROOT / "config", tmp_path)  # kustomize takes relative roots only
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n- {config}\ncomponents:\n- {config}/components/{component}\n"
    )
    return _kustomize(tmp_path)


def test_default_values_render_config(helm: Path) -> None:
    config, chart = _objects(_kustomize()), _objects(_template(helm))
    assert len(config) >= 9
    found = differences(config, chart)
    assert not found, "the chart and config/ differ (bring the chart in line, or allow it in ALLOWED):\n" + "\n".join(
        found
    )


def test_node_agent_enabled_renders_config_with_its_component(helm: Path, tmp_path: Path) -> None:
    """nodeAgent.enabled: the chart renders what config/ with components/nodeagent renders (the DaemonSet, its
    namespace, RBAC and NetworkPolicy, the operator's --node-agent and its ServiceAccount's name)."""
    config = _objects(_kustomize_with(tmp_path, "nodeagent"))
    chart = _objects(_template(helm, "--set", "nodeAgent.enabled=true"))
    assert "DaemonSet/agentsession-nodeagent/agentsession-nodeagent" in config
    found = differences(config, chart)
    assert not found, "the chart and config/ with the node agent differ:\n" + "\n".join(found)


def test_the_claim_conformity_pin_renders_config_with_its_component(helm: Path, tmp_path: Path) -> None:
    """claimConformityPin (off by default): the chart renders what config/ with components/claim-conformity
    renders (issue 51 item 3: the policy whose parameters are the namespace's AgentSessions)."""
    config = _objects(_kustomize_with(tmp_path, "claim-conformity"))
    chart = _objects(_template(helm, "--set", "claimConformityPin=true"))
    name = "ValidatingAdmissionPolicy//agentsession-operator-claim-conforms"
    assert name in config and name not in _objects(_template(helm))
    found = differences(config, chart)
    assert not found, "the chart and config/ with the claim-conformity pin differ:\n" + "\n".join(found)


def test_the_sandbox_router_component_renders_config_with_its_component(helm: Path, tmp_path: Path) -> None:
    """sandboxRouterComponent.enabled (off by default): the chart renders what config/ with
    components/sandbox-router renders (issue 51 item 2: the router, the issuer on, the router checked)."""
    config = _objects(_kustomize_with(tmp_path, "sandbox-router"))
    chart = _objects(_template(helm, "--set", "sandboxRouterComponent.enabled=true"))
    name = "Deployment/agentsession-system/agentsession-sandbox-router"
    assert name in config and name not in _objects(_template(helm))
    found = differences(config, chart)
    assert not found, "the chart and config/ with the sandbox router differ:\n" + "\n".join(found)


def test_the_node_agent_lands_only_where_its_node_selector_says(helm: Path) -> None:
    """Off by default; on, only on nodes labelled agentsession.dev/gvisor=true, or what nodeAgent.nodeSelector
    names instead (GKE Sandbox's node pools: sandbox.gke.io/runtime=gvisor)."""

    def rendered(*args: str) -> dict[str, dict[str, Any]]:
        return _objects(_template(helm, *args))

    default = rendered()
    assert not [k for k in default if k.startswith("DaemonSet/")]
    (operator,) = [d for d in default.values() if d["kind"] == "Deployment"]
    assert not [a for a in operator["spec"]["template"]["spec"]["containers"][0]["args"] if "node-agent" in a]
    on = rendered("--set", "nodeAgent.enabled=true")["DaemonSet/agentsession-nodeagent/agentsession-nodeagent"]
    assert on["spec"]["template"]["spec"]["nodeSelector"] == {"agentsession.dev/gvisor": "true"}
    gke = rendered(
        "--set", "nodeAgent.enabled=true", "--set-json", 'nodeAgent.nodeSelector={"sandbox.gke.io/runtime":"gvisor"}'
    )["DaemonSet/agentsession-nodeagent/agentsession-nodeagent"]
    assert gke["spec"]["template"]["spec"]["nodeSelector"] == {"sandbox.gke.io/runtime": "gvisor"}


def test_the_router_is_admitted_only_when_set_and_said_to_authorize(helm: Path) -> None:
    """Issue 28 item 3: no router by default; `sandboxRouter` admits it, `sandboxRouterAuthorizes` says it
    authorizes every call (else the operator warns at every start)."""

    def args(*values: str) -> list[str]:
        rendered = _objects(_template(helm, *[a for v in values for a in ("--set", v)]))
        (deployment,) = [d for d in rendered.values() if d["kind"] == "Deployment"]
        return [a for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"] if "router" in a]

    assert args() == []
    assert args("sandboxRouter=gw/app=router") == ["--sandbox-router=gw/app=router"]
    both = args("sandboxRouter=gw/app=router", "sandboxRouterAuthorizes=true")
    assert both == ["--sandbox-router=gw/app=router", "--sandbox-router-authorizes"]
    assert args("sandboxRouterAuthorizes=true") == []  # nothing to authorize without a router
    checked = args("sandboxRouter=gw/app=router", "sandboxRouterURL=http://router.gw:8080")
    assert checked == ["--sandbox-router=gw/app=router", "--sandbox-router-url=http://router.gw:8080"]


def test_the_comparison_notices_a_difference() -> None:
    config = {"Service/ns/s": {"kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": 1}]}}}
    chart = {"Service/ns/s": {"kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": 2}]}}}
    assert differences(config, chart) == ["Service/ns/s: spec.ports[0].port: config/ 1, chart 2"]
    assert differences(config, {}) == ["Service/ns/s: in config/, not in the chart"]
    namespace = {"Namespace//agentsession-system": {"kind": "Namespace", "metadata": {"name": "agentsession-system"}}}
    assert differences(namespace, {}) == []  # CONFIG_ONLY


def test_values_image_replicas_resources_log_level_and_certificate_secret(helm: Path) -> None:
    rendered = _objects(
        _template(
            helm,
            "--set",
            "image.repository=registry.local/op",
            "--set",
            "image.tag=dev",
            "--set",
            "replicas=0",
            "--set",
            "resources.limits.memory=1Gi",
            "--set",
            "logLevel=DEBUG",
            "--set",
            "webhook.certificate.source=secret",
            "--set",
            "webhook.certificate.secretName=tls",
            "--set",
            "namespace.name=ops",
        )
    )
    deploy = rendered["Deployment/ops/agentsession-operator"]
    pod = deploy["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "registry.local/op:dev" and deploy["spec"]["replicas"] == 0
    assert container["resources"]["limits"]["memory"] == "1Gi"
    assert "--log-level=DEBUG" in container["args"]
    # A provided Secret: read (never written) by name, in the chart's namespace; nothing ships it.
    assert "--webhook-cert-secret=$(POD_NAMESPACE)/tls" in container["args"]
    assert "--no-webhook-cert-generate" in container["args"]
    assert "volumes" not in pod or all("secret" not in v for v in pod["volumes"])
    role = rendered["Role/ops/agentsession-operator-webhook-certificate"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["tls"], "verbs": ["get"]}]
    assert not [k for k in rendered if k.startswith("Secret/")]
    hook = rendered["ValidatingWebhookConfiguration//agentsession.dev"]["webhooks"][0]
    assert hook["clientConfig"]["service"]["namespace"] == "ops"
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["ops", "kube-system"]
    binding = rendered["ClusterRoleBinding//agentsession-operator"]
    assert binding["subjects"][0]["namespace"] == "ops"
    bad = subprocess.run(
        [
            str(helm),
            "template",
            "x",
            str(CHART),
            "--kube-version",
            versions.KUBERNETES,
            "--set",
            "webhook.certificate.source=nope",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # values.schema.json refuses it first (the template's own check stays, for --skip-schema-validation).
    assert bad.returncode != 0 and "'generated', 'certManager', 'secret'" in bad.stderr, bad.stderr


def test_cert_manager_option(helm: Path) -> None:
    """webhook.certificate.source=certManager: an Issuer and a Certificate write the Secret, cainjector the caBundle."""
    rendered = _objects(_template(helm, "--set", "webhook.certificate.source=certManager"))
    certificate = rendered["Certificate/agentsession-system/agentsession-webhook"]
    assert certificate["spec"]["secretName"] == "agentsession-webhook-cert"
    assert "agentsession-operator.agentsession-system.svc" in certificate["spec"]["dnsNames"]
    assert "Issuer/agentsession-system/agentsession-webhook" in rendered
    configuration = rendered["ValidatingWebhookConfiguration//agentsession.dev"]
    annotations = configuration["metadata"]["annotations"]
    assert annotations["cert-manager.io/inject-ca-from"] == "agentsession-system/agentsession-webhook"
    assert "Secret/agentsession-system/agentsession-webhook-cert" not in rendered
    container = rendered["Deployment/agentsession-system/agentsession-operator"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert "--no-webhook-cert-generate" in container["args"]


def test_webhook_client_certificate_option(helm: Path) -> None:
    """webhook.clientAuth: the CA from a ConfigMap, mounted read-only, and the names passed as flags."""
    rendered = _objects(
        _template(
            helm,
            "--set",
            "webhook.clientAuth.caConfigMap=apiserver-webhook-client-ca",
            "--set",
            "webhook.clientAuth.names={kube-apiserver-webhook-client}",
        )
    )
    pod = rendered["Deployment/agentsession-system/agentsession-operator"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "--webhook-client-ca=/etc/agentsession/webhook-client-ca/ca.crt" in container["args"]
    assert "--webhook-client-name=kube-apiserver-webhook-client" in container["args"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "webhook-client-ca")
    assert mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == "webhook-client-ca")
    assert volume["configMap"]["name"] == "apiserver-webhook-client-ca"
    plain = _objects(_template(helm))["Deployment/agentsession-system/agentsession-operator"]
    assert not any("--webhook-client" in a for a in plain["spec"]["template"]["spec"]["containers"][0]["args"])


def test_chart_crds_are_the_generated_ones() -> None:
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        assert (CHART / "crds" / path.name).read_text() == path.read_text(), f"run make crds ({path.name})"
