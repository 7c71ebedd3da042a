"""The operator end to end: real API server, agent-sandbox controller and runtimes."""

from __future__ import annotations

import concurrent.futures
import ipaddress
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).parents[2] / "examples"


def session_in_phase(kube: Kube, name: str, namespace: str, phase: str, timeout: float = 90) -> dict[str, Any]:
    return kube.wait_for(
        f"session {name} {phase}",
        lambda: (
            (s := kube.get("agentsession", name, namespace)) and (s.get("status") or {}).get("phase") == phase and s
        ),
        timeout=timeout,
    )


@pytest.mark.node  # env, volumes and pod labels in a real pod
def test_examples_reach_ready_with_env_pvc_and_pod_labels(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.run("apply", "-n", namespace, "-f", str(EXAMPLES))
    basic = session_in_phase(kube, "basic", namespace, "Ready")
    status = basic["status"]
    assert ipaddress.ip_address(status["podIPs"][0]) in ipaddress.ip_network(kube.cluster.pod_cidr)
    assert status["claimName"] == "basic" and status["podName"] == status["sandboxName"]
    assert status["launchType"] in ("warm", "cold") and status["expiresAt"] and status["readyAt"]
    assert status["observedGeneration"] == basic["metadata"]["generation"]
    ready = kube.condition(basic, "Ready")
    assert ready and ready["status"] == "True" and ready["reason"]

    ws = session_in_phase(kube, "workspace", namespace, "Ready")
    assert ws["status"]["launchType"] == "cold"  # env and volumes force a cold start
    pod = kube.get("pod", ws["status"]["podName"], namespace)
    assert pod is not None
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["LANG"] == "C.UTF-8" and env["PROJECT"] == "demo"
    assert pod["metadata"]["labels"]["sandbox.users.io/team"] == "research"
    assert pod["metadata"]["annotations"]["example.com/owner"] == "research-bot"
    pvc_volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "workspace")
    pvc = kube.get("pvc", pvc_volume["persistentVolumeClaim"]["claimName"], namespace)
    assert pvc is not None and pvc["status"]["phase"] == "Bound"
    # The runtime sees the env and the mounted workspace.
    out = httpx.post(
        f"http://{ws['status']['podIPs'][0]}:8888/execute",
        json={"command": "sh -c 'echo $PROJECT; df /workspace >/dev/null && echo mounted'"},
        timeout=30,
    )
    assert out.json()["stdout"].split() == ["demo", "mounted"]
    claim = kube.get("sandboxclaim", ws["status"]["claimName"], namespace)
    assert claim is not None
    refs = claim["metadata"]["ownerReferences"]
    assert refs == [
        {
            "apiVersion": "agentsession.dev/v1alpha1",
            "kind": "AgentSession",
            "name": "workspace",
            "uid": ws["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert claim["metadata"]["labels"]["sandbox.users.io/team"] == "research"
    assert "team" not in claim["metadata"]["labels"]  # the session's own labels are not copied wholesale

    table = kube.run("get", "agentsessions", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "POOL", "POD", "IP", "EXPIRES", "AGE"]
    assert any(line.split()[:3] == ["basic", "Ready", "python-pool"] for line in table[1:])
    assert len(kube.run("get", "ags", "-n", namespace, "-o", "name").stdout.split()) == 2
    explain = kube.run("explain", "agentsession.spec.idleTimeout").stdout
    assert "duration" in explain.lower()


def test_pod_label_outside_the_allowlist_is_refused_before_any_claim(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """agent-sandbox would fail the claim later (InvalidMetadata); the operator's webhook refuses it now.
    (With admission bypassed, the reconciler ends it Failed instead: tests/e2e/test_policy.py.)"""
    kube.apply(manifests.template("pause"), manifests.warm_pool("pool", "pause", 0), namespace=namespace)
    proc = kube.apply(
        manifests.session("bad-label", "pool", podLabels={"example.com/team": "a"}), namespace=namespace, check=False
    )
    assert proc.returncode != 0
    assert "example.com/team" in proc.stderr and "sandbox.users.io" in proc.stderr, proc.stderr
    assert kube.get("agentsession", "bad-label", namespace) is None
    assert kube.list("sandboxclaim", namespace) == []


def test_ttl_expiry_ends_expired_and_removes_the_claim(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    kube.apply(
        manifests.template("pause"),
        manifests.warm_pool("pool", "pause", 0),
        manifests.session("short", "pool", ttl="6s"),
        namespace=namespace,
    )
    ready = session_in_phase(kube, "short", namespace, "Ready", timeout=60)
    claim_name = ready["status"]["claimName"]
    expired = session_in_phase(kube, "short", namespace, "Expired", timeout=60)
    cond = kube.condition(expired, "Expired")
    assert cond and cond["reason"] == "TTLExpired"
    kube.wait_for("claim deleted", lambda: kube.get("sandboxclaim", claim_name, namespace) is None)
    kube.wait_for("pod deleted", lambda: kube.get("pod", ready["status"]["podName"], namespace) is None)


def test_deleting_the_session_cascades(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    kube.apply(
        manifests.template("pause"),
        manifests.warm_pool("pool", "pause", 0),
        manifests.session("doomed", "pool"),
        namespace=namespace,
    )
    status = session_in_phase(kube, "doomed", namespace, "Ready")["status"]
    kube.run("delete", "agentsession", "doomed", "-n", namespace, "--timeout=30s")
    kube.wait_for("claim collected", lambda: kube.get("sandboxclaim", status["claimName"], namespace) is None)
    kube.wait_for("sandbox collected", lambda: kube.get("sandbox", status["sandboxName"], namespace) is None)
    kube.wait_for("pod collected", lambda: kube.get("pod", status["podName"], namespace) is None)


def test_missing_pool_waits_then_proceeds(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    kube.apply(manifests.session("early", "later-pool"), namespace=namespace)
    pending = session_in_phase(kube, "early", namespace, "Pending", timeout=30)
    ready = kube.condition(pending, "Ready")
    assert ready and ready["reason"] == "WarmPoolNotFound" and "later-pool" in ready["message"]
    kube.apply(manifests.template("pause"), manifests.warm_pool("later-pool", "pause", 0), namespace=namespace)
    session_in_phase(kube, "early", namespace, "Ready", timeout=60)


def test_operator_killed_during_concurrent_creations(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    kube.apply(manifests.template("pause"), manifests.warm_pool("pool", "pause", 0), namespace=namespace)
    names = [f"burst-{i:02d}" for i in range(20)]

    def create(name: str) -> None:
        kube.apply(manifests.session(name, "pool"), namespace=namespace)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(create, n) for n in names]
        kube.wait_for(
            "some claims created", lambda: len(kube.list("sandboxclaim", namespace)) >= 3, timeout=60, interval=0.05
        )
        operator.kill()
        try:
            for f in futures:
                f.result()
        finally:
            operator.start()  # the session's shared operator, whatever failed
    for name in names:
        session_in_phase(kube, name, namespace, "Ready", timeout=120)
    claims = kube.list("sandboxclaim", namespace)
    assert sorted(c["metadata"]["name"] for c in claims) == names
    sessions = {s["metadata"]["name"]: s["metadata"]["uid"] for s in kube.list("agentsession", namespace)}
    for claim in claims:
        assert claim["metadata"]["ownerReferences"][0]["uid"] == sessions[claim["metadata"]["name"]]
        assert kube.is_true(claim, "Ready")


INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("ttl not a duration", {"ttl": "two hours"}, "spec.ttl"),
    ("ttl zero", {"ttl": "0s"}, "spec.ttl"),
    ("idleTimeout wrong type", {"idleTimeout": 15}, "spec.idleTimeout"),
    ("idleAction unknown", {"idleAction": "Explode"}, "spec.idleAction"),
    ("env name invalid", {"env": [{"name": "1 BAD", "value": "x"}]}, "spec.env"),
    ("env duplicate", {"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, "spec.env"),
    ("label key invalid", {"labels": {"bad key!": "x"}}, "spec.labels"),
    ("label value invalid", {"labels": {"team": "not a valid value!"}}, "spec.labels"),
    ("pod label without domain", {"podLabels": {"team": "a"}}, "spec.podLabels"),
    ("unknown field", {"warmPoolRef": {"name": "p"}, "tll": "2h"}, "tll"),
    ("suspend wrong type", {"suspend": "yes"}, "spec.suspend"),
]


@pytest.mark.parametrize(("case", "spec", "field"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_manifests_refused_by_the_api_server(
    kube: Kube, namespace: str, case: str, spec: dict[str, Any], field: str
) -> None:
    kube.run("apply", "--server-side", "--force-conflicts", "-f", str(Path(__file__).parents[2] / "crds"))
    body = manifests.session("invalid", None, **spec)
    proc = kube.run("create", "--validate=strict", "-n", namespace, "-f", "-", input=yaml.safe_dump(body), check=False)
    assert proc.returncode != 0, f"{case}: accepted"
    assert field in proc.stderr, f"{case}: {proc.stderr}"
    assert kube.get("agentsession", "invalid", namespace) is None


@pytest.mark.parametrize("field", ["warmPoolRef", "env", "volumeClaimTemplates"])
def test_immutable_fields_refused_on_update(kube: Kube, namespace: str, field: str) -> None:
    kube.run("apply", "--server-side", "--force-conflicts", "-f", str(Path(__file__).parents[2] / "crds"))
    kube.apply(manifests.session("frozen", "pool-a", ttl="1h"), namespace=namespace)
    changes = {
        "warmPoolRef": {"warmPoolRef": {"name": "pool-b"}},
        "env": {"env": [{"name": "ADDED", "value": "1"}]},
        "volumeClaimTemplates": {
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "w"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                }
            ]
        },
    }[field]
    proc = kube.run(
        "patch",
        "agentsession",
        "frozen",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": changes}),
        check=False,
    )
    assert proc.returncode != 0 and field in proc.stderr and "immutable" in proc.stderr, proc.stderr
    # Mutable fields still change.
    kube.run("patch", "agentsession", "frozen", "-n", namespace, "--type=merge", "-p", '{"spec": {"ttl": "2h"}}')


def test_generated_crds_pass_server_side_dry_run(kube: Kube) -> None:
    proc = kube.run("apply", "--dry-run=server", "-f", str(Path(__file__).parents[2] / "crds"))
    assert "agentsessions.agentsession.dev" in proc.stdout


def metric_values(operator: OperatorProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample the operator serves, by (name, labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(operator.metrics())
        for sample in family.samples
    }


def metric_sum(values: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include these (0 when the operator has none yet)."""
    wanted = set(labels.items())
    return sum(value for (n, have), value in values.items() if n == name and wanted <= have)


def test_operator_metrics_move_with_a_session(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    """The metrics count what happened: one session's life (created, Ready, expired by its TTL) moves
    each of them by exactly what that session did, in its own namespace."""
    kube.apply(manifests.template("pause"), manifests.warm_pool("pool", "pause", 0), namespace=namespace)
    before = metric_values(operator)
    kube.apply(manifests.session("counted", "pool", ttl="8s"), namespace=namespace)
    session_in_phase(kube, "counted", namespace, "Ready")

    def moved(name: str, **labels: str) -> float:
        return metric_sum(metric_values(operator), name, **labels) - metric_sum(before, name, **labels)

    kube.wait_for(
        "the Ready session counted",
        lambda: moved("agentsession_sessions", namespace=namespace, phase="Ready") == 1,
        timeout=10,
    )
    assert moved("agentsession_claims_created_total") >= 1
    assert moved("agentsession_time_to_ready_seconds_count") >= 1
    assert moved("agentsession_reconcile_duration_seconds_count") >= 1
    session_in_phase(kube, "counted", namespace, "Expired", timeout=60)
    kube.wait_for(
        "the Expired session counted",
        lambda: (
            moved("agentsession_sessions", namespace=namespace, phase="Expired") == 1
            and moved("agentsession_sessions", namespace=namespace, phase="Ready") == 0
        ),
        timeout=10,
    )
    assert moved("agentsession_claims_deleted_total") >= 1
    assert moved("agentsession_reap_lag_seconds_count") >= 1
    assert metric_sum(metric_values(operator), "agentsession_leader") == 1
