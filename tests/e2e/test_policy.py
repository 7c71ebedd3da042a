"""AgentSessionPolicy end to end: refused at admission by the operator's webhook, and re-checked by the
reconciler for whatever slips past it (operator down: failurePolicy Ignore)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess
from tests.e2e.observed import wait_pass_after_now

pytestmark = pytest.mark.e2e

WEBHOOK_CONFIGURATION = "agentsession.dev"
REFUSED = "AgentSession refused by AgentSessionPolicy: "

POLICY_SPEC: dict[str, Any] = {
    "defaults": {"ttl": "30m", "idleTimeout": "10m"},
    "limits": {"maxTtl": "1h", "allowedWarmPools": ["pool"], "env": {"deny": ["AWS_*"]}},
    "labels": {"required": ["team"], "values": {"team": "^(a|b)$"}},
    "cleanup": {"maxSessionsPerLabel": {"key": "team", "max": 2}},
}

TEAM_A = {"team": "a"}

# (what, manifest, the sentence the refusal must carry)
VIOLATIONS: list[tuple[str, dict[str, Any], str]] = [
    (
        "ttl over maxTtl",
        manifests.session("too-long", "pool", TEAM_A, ttl="2h"),
        "spec.ttl 2h exceeds the policy maximum 1h (AgentSessionPolicy rules)",
    ),
    (
        "pool not allowed",
        manifests.session("wrong-pool", "other-pool", TEAM_A),
        "spec.warmPoolRef.name other-pool is not an allowed warm pool (allowed: pool) (AgentSessionPolicy rules)",
    ),
    (
        "env denied",
        manifests.session("leaky", "pool", TEAM_A, env=[{"name": "AWS_SECRET", "value": "x"}]),
        "spec.env AWS_SECRET is denied by the pattern AWS_* (AgentSessionPolicy rules)",
    ),
    (
        "required label missing",
        manifests.session("anonymous", "pool"),
        "metadata.labels is missing the required label team (AgentSessionPolicy rules)",
    ),
    (
        "label value not allowed",
        manifests.session("team-c", "pool", {"team": "c"}),
        "metadata.labels team=c does not match the pattern ^(a|b)$ (AgentSessionPolicy rules)",
    ),
]


def policy(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSessionPolicy",
        "metadata": {"name": "rules"},
        "spec": spec or POLICY_SPEC,
    }


def status_of(kube: Kube, name: str, namespace: str) -> dict[str, Any]:
    return dict(((kube.get("agentsession", name, namespace) or {}).get("status")) or {})


def refusal(kube: Kube, body: dict[str, Any], namespace: str, dry_run: bool = False) -> str | None:
    """The API server's error when it refuses ``body``, None when it stores it."""
    args = ["create", "-n", namespace, "-f", "-"] + (["--dry-run=server"] if dry_run else [])
    proc = kube.run(*args, input=yaml.safe_dump(body), check=False)
    return proc.stderr if proc.returncode != 0 else None


def wait_enforced(kube: Kube, namespace: str) -> None:
    """Until the webhook is registered for the running operator and that operator has seen the policy."""
    probe = manifests.session("probe", "pool", {"team": "c"})
    kube.wait_for(
        "the admission webhook to enforce the policy",
        lambda: REFUSED in (refusal(kube, probe, namespace, dry_run=True) or ""),
        timeout=60,
        interval=0.5,
    )


@pytest.fixture
def policed(kube: Kube, namespace: str, operator: OperatorProcess) -> str:
    kube.apply(
        manifests.template("pause"),
        manifests.warm_pool("pool", "pause", 0),
        manifests.warm_pool("other-pool", "pause", 0),
        policy(),
        namespace=namespace,
    )
    wait_enforced(kube, namespace)
    return namespace


def webhookless_operator(cluster: Any, kubeconfig: str) -> OperatorProcess:
    """The operator with ``--webhook-port 0``: it must neither serve nor register a webhook."""
    log = cluster.paths.logs / "operator-e2e-webhookless.log"
    log.unlink(missing_ok=True)
    return OperatorProcess(cluster, kubeconfig, extra_args=["--webhook-port", "0"], log_name=log.name)


@pytest.fixture
def operator_down(kube: Kube, operator: OperatorProcess) -> Iterator[OperatorProcess]:
    """Kill the shared operator for the test; start it again afterwards whatever happens."""
    operator.kill()
    try:
        yield operator
    finally:
        operator.start()


def test_violations_are_refused_at_admission_naming_the_rule(kube: Kube, policed: str) -> None:
    namespace = policed
    for what, body, sentence in VIOLATIONS:
        error = refusal(kube, body, namespace)
        assert error is not None, f"{what}: admitted"
        assert 'admission webhook "policy.agentsession.dev" denied the request' in error, f"{what}: {error}"
        assert REFUSED in error and sentence in error, f"{what}: {error}"
        assert kube.get("agentsession", body["metadata"]["name"], namespace) is None, what

    # Every broken rule at once: one refusal listing all of them.
    everything = manifests.session(
        "everything", "other-pool", {"team": "c"}, ttl="2h", env=[{"name": "AWS_SECRET", "value": "x"}]
    )
    error = refusal(kube, everything, namespace) or ""
    for _, _, sentence in VIOLATIONS[:3] + VIOLATIONS[4:]:
        assert sentence in error, error

    # maxSessionsPerLabel: two team=a sessions are fine, the third is refused; team=b is its own count.
    for name in ("a1", "a2"):
        assert refusal(kube, manifests.session(name, "pool", TEAM_A), namespace) is None, name
    error = refusal(kube, manifests.session("a3", "pool", TEAM_A), namespace)
    assert error is not None and REFUSED in error, "the third team=a session was admitted"
    assert (
        "2 unfinished AgentSessions already carry team=a (a1, a2); the policy maximum is 2 (AgentSessionPolicy rules)"
        in error
    )
    assert refusal(kube, manifests.session("b1", "pool", {"team": "b"}), namespace) is None

    # A compliant session without ttl: the policy default is recorded in status, spec stays as written.
    a1 = kube.wait_for(
        "a1 resolved",
        lambda: (s := kube.get("agentsession", "a1", namespace)) and (s.get("status") or {}).get("resolved") and s,
        timeout=60,
    )
    assert "ttl" not in a1["spec"] and "idleTimeout" not in a1["spec"]
    assert a1["status"]["resolved"]["ttl"] == "30m" and a1["status"]["resolved"]["idleTimeout"] == "10m"
    assert a1["status"].get("phase") != "Failed", a1["status"]

    # UPDATE: a change that breaks a rule is refused; a compliant one goes through.
    proc = kube.run(
        "patch", "agentsession", "a1", "-n", namespace, "--type=merge", "-p", '{"spec":{"ttl":"5h"}}', check=False
    )
    assert proc.returncode != 0 and "spec.ttl 5h exceeds the policy maximum 1h" in proc.stderr, proc.stderr
    proc = kube.run("label", "agentsession", "a1", "-n", namespace, "team=z", "--overwrite", check=False)
    assert proc.returncode != 0 and "metadata.labels team=z does not match" in proc.stderr, proc.stderr
    kube.run("patch", "agentsession", "a1", "-n", namespace, "--type=merge", "-p", '{"spec":{"ttl":"45m"}}')


def test_session_slipped_past_admission_fails_with_every_violation(
    kube: Kube, policed: str, operator_down: OperatorProcess
) -> None:
    namespace = policed
    everything = manifests.session(
        "slipped", "other-pool", {"team": "c"}, ttl="2h", env=[{"name": "AWS_SECRET", "value": "x"}]
    )
    # The shared operator was killed: its webhook registration points at a closed port, and
    # failurePolicy Ignore lets the write through.
    assert refusal(kube, everything, namespace) is None
    # Admission off altogether: no configuration, and an operator that registers none.
    kube.run("delete", "validatingwebhookconfiguration", WEBHOOK_CONFIGURATION, "--ignore-not-found")
    webhookless = webhookless_operator(operator_down.cluster, operator_down.kubeconfig)
    webhookless.start()
    try:
        failed = kube.wait_for(
            "slipped Failed",
            lambda: (
                (s := kube.get("agentsession", "slipped", namespace))
                and (s.get("status") or {}).get("phase") == "Failed"
                and s
            ),
            timeout=60,
        )
        compliant = kube.condition(failed, "PolicyCompliant")
        assert compliant and compliant["status"] == "False" and compliant["reason"] == "PolicyViolation", compliant
        for _, _, sentence in VIOLATIONS[:3] + VIOLATIONS[4:]:
            assert sentence in compliant["message"], compliant["message"]
        assert kube.list("sandboxclaim", namespace) == []
        wait_pass_after_now(kube, "slipped", namespace)  # a pass that would create a claim has run
        assert kube.list("sandboxclaim", namespace) == []
        # Not the configuration's absence: another operator on this cluster may recreate it.
        log = webhookless.log.read_text()
        assert "agentsession operator started" in log
        assert "Reconfiguring the validating webhook" not in log
        assert "admission webhook enabled" not in log
    finally:
        webhookless.stop()


def _events_for(kube: Kube, name: str, namespace: str) -> list[dict[str, Any]]:
    events = json.loads(kube.run("get", "events.v1.events.k8s.io", "-n", namespace, "-o", "json").stdout)["items"]
    return [e for e in events if (e.get("regarding") or {}).get("name") == name]


def test_lowering_max_ttl_moves_expiry_earlier(kube: Kube, policed: str) -> None:
    namespace = policed
    kube.apply(manifests.session("running", "pool", TEAM_A), namespace=namespace)
    ready = kube.wait_for(
        "running Ready", lambda: status_of(kube, "running", namespace).get("phase") == "Ready" and True, timeout=90
    )
    assert ready
    session = kube.get("agentsession", "running", namespace)
    assert session is not None
    created = dt.datetime.fromisoformat(session["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    before = dt.datetime.fromisoformat(session["status"]["expiresAt"].replace("Z", "+00:00"))
    assert before == created + dt.timedelta(minutes=30)  # defaults.ttl
    seen = {e["metadata"]["name"] for e in _events_for(kube, "running", namespace)}

    # A 1 s grace period (the default, 1h, would keep the former expiry for an hour: test_security.py).
    lowered = {**POLICY_SPEC["limits"], "maxTtl": "10m", "maxTtlGracePeriod": "1s"}
    kube.apply(policy({**POLICY_SPEC, "limits": lowered}), namespace=namespace)
    moved = kube.wait_for(
        "expiresAt to move earlier",
        lambda: (
            (at := status_of(kube, "running", namespace).get("expiresAt"))
            and dt.datetime.fromisoformat(at.replace("Z", "+00:00")) < before
            and at
        ),
        timeout=30,
    )
    assert dt.datetime.fromisoformat(moved.replace("Z", "+00:00")) == created + dt.timedelta(minutes=10)
    claim = kube.get("sandboxclaim", session["status"]["claimName"], namespace)
    assert claim is not None
    shutdown = claim["spec"]["lifecycle"]["shutdownTime"]
    assert dt.datetime.fromisoformat(shutdown.replace("Z", "+00:00")) == created + dt.timedelta(minutes=10)
    assert status_of(kube, "running", namespace)["phase"] == "Ready"  # still running, just shorter

    kube.wait_for(
        "an Event about the new expiry",
        lambda: [e for e in _events_for(kube, "running", namespace) if e["metadata"]["name"] not in seen],
        timeout=10,
        interval=0.5,
    )
