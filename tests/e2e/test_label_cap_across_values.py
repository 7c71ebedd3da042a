"""Issue 28 item 6: `maxSessionsPerLabel` counts per label value, and the tenant chooses the value. A tenant
under `{key: team, max: 2}` passes the cap with team=a1, team=a2, team=a3, ... `countAcrossValues: true` makes
the cap one group for every session carrying the key, whatever its value, at admission and at every pass."""

from __future__ import annotations

import json
from typing import Any

import pytest

from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = pytest.mark.e2e

CAP = 2
REFUSED = "AgentSession refused by AgentSessionPolicy: "
SENTENCE = "carry the label team (any value, countAcrossValues)"


def across_policy() -> dict[str, Any]:
    return {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSessionPolicy",
        "metadata": {"name": "team-cap"},
        "spec": {"cleanup": {"maxSessionsPerLabel": {"key": "team", "max": CAP, "countAcrossValues": True}}},
    }


def create(kube: Kube, namespace: str, body: dict[str, Any], dry_run: bool = False) -> str | None:
    """The API server's error when it refuses ``body`` (or its CRD prunes nothing but fails), None when stored."""
    args = ["create", "-n", namespace, "-f", "-"] + (["--dry-run=server"] if dry_run else [])
    proc = kube.run(*args, input=json.dumps(body), check=False)
    return proc.stderr if proc.returncode != 0 else None


def waiting(name: str, team: str) -> dict[str, Any]:
    """A session on a warm pool that does not exist: it waits, using no pod."""
    return manifests.session(name, "no-such-pool", {"team": team}, ttl="10m")


def test_a_tenant_cannot_pass_a_label_cap_by_choosing_new_values(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """The attack: team=a1, team=a2, team=a3 under a cap of 2 sessions per team. Before: the CRD had no
    countAcrossValues (the create of the policy was refused as an unknown field, or every session admitted);
    now the third value is refused, naming the policy and the sessions holding the places."""
    error = create(kube, namespace, across_policy())
    assert error is None, error
    stored = kube.get("agentsessionpolicy", "team-cap", namespace) or {}
    assert stored["spec"]["cleanup"]["maxSessionsPerLabel"].get("countAcrossValues") is True, "the CRD pruned it"
    kube.wait_for(
        "the webhook to know the policy",
        lambda: create(kube, namespace, waiting("probe", "p"), dry_run=True) is None,
        timeout=60,
        interval=0.5,
    )
    assert create(kube, namespace, waiting("s1", "a1")) is None
    assert create(kube, namespace, waiting("s2", "a2")) is None
    error = create(kube, namespace, waiting("s3", "a3"))
    assert error is not None and REFUSED in error, error
    assert SENTENCE in error and "(s1, s2)" in error, error
    assert "the policy maximum is 2 (AgentSessionPolicy team-cap)" in error, error
    assert kube.get("agentsession", "s3", namespace) is None
    # A session without the label is not counted (the namespace cap is for that: docs/security.md).
    assert create(kube, namespace, manifests.session("free", "no-such-pool", ttl="10m"), dry_run=True) is None
    # Relabelling a stored session into the group is refused too.
    assert create(kube, namespace, manifests.session("plain", "no-such-pool", ttl="10m")) is None
    proc = kube.run("label", "agentsession", "plain", "-n", namespace, "team=a9", check=False)
    assert proc.returncode != 0 and SENTENCE in proc.stderr, proc.stderr
    # A finished session gives its place up.
    kube.run("delete", "agentsession", "s1", "-n", namespace, "--wait=true")
    kube.wait_for(
        "a place to free",
        lambda: create(kube, namespace, waiting("s4", "a4"), dry_run=True) is None,
        timeout=30,
        interval=0.5,
    )


def test_the_reconciler_holds_a_cap_across_values_for_sessions_stored_before_it(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """The backstop: sessions stored before the policy are ranked by creation across every value of the key;
    the first CAP go on, the third (another value) waits (Failed, PolicyViolation, no claim) and moves up when
    a place ahead frees."""
    for name, team in (("s1", "a1"), ("s2", "a2"), ("s3", "a3")):
        assert create(kube, namespace, waiting(name, team)) is None
    assert create(kube, namespace, across_policy()) is None

    def message(name: str) -> str:
        status = (kube.get("agentsession", name, namespace) or {}).get("status") or {}
        failed = next((c for c in status.get("conditions") or [] if c.get("type") == "Failed"), {})
        return str(failed.get("message") or "")

    kube.wait_for("s3 to wait over the cap", lambda: SENTENCE in message("s3"), timeout=60, interval=0.5)
    assert "(s1, s2)" in message("s3"), message("s3")
    assert not (kube.get("agentsession", "s3", namespace) or {}).get("status", {}).get("claimName")
    for name in ("s1", "s2"):
        assert SENTENCE not in message(name), message(name)
    kube.run("delete", "agentsession", "s1", "-n", namespace, "--wait=true")
    kube.wait_for("s3 to move up", lambda: SENTENCE not in message("s3"), timeout=60, interval=0.5)
