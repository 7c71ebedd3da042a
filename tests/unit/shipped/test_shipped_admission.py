"""What config/ ships for admission (issue 11 items 10 and 11), read from the YAML files themselves.

Attacks these close: `failurePolicy: Ignore` and a configuration kopf created at start and removed at
every clean shutdown left admission off during every restart and rollout; a ClusterRole that may
`create` webhook configurations (not limitable by name) let a compromised operator register a
cluster-wide mutating webhook.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "config"
OPERATOR_NAMESPACE = "agentsession-system"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _kustomized_files() -> list[Path]:
    kustomization = yaml.safe_load((CONFIG / "kustomization.yaml").read_text())
    return [CONFIG / r for r in kustomization["resources"] if r.endswith(".yaml")]


def _shipped(kind: str) -> list[dict[str, Any]]:
    return [d for f in _kustomized_files() for d in _docs(f) if d["kind"] == kind]


def test_the_validating_configuration_is_shipped_and_fails_closed() -> None:
    (configuration,) = _shipped("ValidatingWebhookConfiguration")
    assert configuration["metadata"]["name"] == "agentsession.dev"
    hooks = configuration["webhooks"]
    assert [h["name"] for h in hooks] == ["policy.agentsession.dev"]
    for hook in hooks:
        assert hook["failurePolicy"] == "Fail"
        assert hook["sideEffects"] == "None"
        assert hook["clientConfig"]["service"] == {
            "namespace": OPERATOR_NAMESPACE,
            "name": "agentsession-operator",
            "port": 443,
            "path": "/policy",
        }
        (rule,) = hook["rules"]
        assert rule["resources"] == ["agentsessions"] and sorted(rule["operations"]) == ["CREATE", "UPDATE"]
        # Activity annotations (metadata only) skip the webhook: they never fail closed with it.
        (condition,) = hook["matchConditions"]
        assert "object.spec != oldObject.spec" in condition["expression"]
        assert "labels" in condition["expression"]
        (exempt,) = hook["namespaceSelector"]["matchExpressions"]
        assert exempt == {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": [OPERATOR_NAMESPACE, "kube-system"],
        }
    # The operator has no mutating handler: no MutatingWebhookConfiguration is shipped or allowed.
    assert _shipped("MutatingWebhookConfiguration") == []


def test_the_certificate_secret_is_shipped_without_data() -> None:
    (secret,) = [s for s in _shipped("Secret") if s["metadata"]["name"] == "agentsession-webhook-cert"]
    # No data: re-applying config/ never overwrites the certificate the operator generated.
    assert "data" not in secret and "stringData" not in secret


def test_the_operator_may_only_get_and_patch_its_configuration() -> None:
    (role,) = [r for r in _shipped("ClusterRole") if r["metadata"]["name"] == "agentsession-operator"]
    for rule in role["rules"]:
        if "admissionregistration.k8s.io" not in rule["apiGroups"]:
            continue
        assert rule["resources"] == ["validatingwebhookconfigurations"], rule
        assert rule.get("resourceNames") == ["agentsession.dev"], rule
        assert sorted(rule["verbs"]) == ["get", "patch"], rule


def test_the_operator_reads_and_fills_only_its_certificate_secret() -> None:
    rules = [
        rule
        for role in _shipped("Role")
        if role["metadata"].get("namespace", OPERATOR_NAMESPACE) == OPERATOR_NAMESPACE
        for rule in role["rules"]
        if "secrets" in rule["resources"]
    ]
    assert rules == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["agentsession-webhook-cert"],
            "verbs": ["get", "patch"],
        }
    ]


def test_the_deployment_keeps_admission_served_during_a_rollout() -> None:
    (deploy,) = _shipped("Deployment")
    spec = deploy["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    container = spec["template"]["spec"]["containers"][0]
    assert "--webhook-cert-secret=$(POD_NAMESPACE)/agentsession-webhook-cert" in container["args"]
    # Ready (in the Service) only while the webhook port listens; out of the Service before it stops.
    assert container["readinessProbe"]["tcpSocket"] == {"port": "webhook"}
    assert container["lifecycle"]["preStop"]["sleep"]["seconds"] > 0


def test_a_drain_keeps_one_replica() -> None:
    (budget,) = _shipped("PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "agentsession-operator"}


def test_the_claim_creation_pin_refuses_every_env_hook_a_session_is_refused() -> None:
    """Issue 51 item 3: the operator's claims carry no loader or interpreter hook, whatever their owner (a
    made-up one too); the pin's lists are names.DENIED_ENV_DEFAULTS, globs as prefixes, names as names."""
    import re

    from agentsession_api import names

    policy = next(
        d
        for d in _docs(CONFIG / "admission" / "operator_write_pins.yaml")
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == "agentsession-operator-claim-creates"
    )
    (rule,) = [v["expression"] for v in policy["spec"]["validations"] if "object.spec.?env" in v["expression"]]
    prefixes_text, names_text = [m for m in re.findall(r"\[([^\]]*)\]", rule) if m.strip()]
    prefixes = re.findall(r"'([^']*)'", prefixes_text)
    exact = re.findall(r"'([^']*)'", names_text)
    assert sorted(f"{p}*" for p in prefixes) + sorted(exact) == sorted(
        g for g in names.DENIED_ENV_DEFAULTS if g.endswith("*")
    ) + sorted(g for g in names.DENIED_ENV_DEFAULTS if not g.endswith("*"))
    assert "e.name.startsWith(p)" in rule and "e.name in" in rule
