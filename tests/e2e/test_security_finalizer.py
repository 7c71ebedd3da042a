"""Issue 28 item 5: a finalizer of the tenant's own keeps a deleted session's object for good.

The garbage collector takes a session's claim, Sandbox, Pod and PVCs only once the session object is
gone. Before: with ``example.com/keep`` on it, a deleted session gave up its maxSessionsPerLabel place
at once, got no reaping and no policy action (phase Terminating did nothing), and its sandbox ran on.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess
from tests.e2e.test_policy import REFUSED, refusal, status_of
from tests.e2e.test_security import first_of_a_capped_team

pytestmark = pytest.mark.e2e

KEEP = "example.com/keep"


def _set_finalizers(kube: Kube, kind: str, name: str, namespace: str, add: bool) -> None:
    """Add or remove KEEP, leaving every other finalizer (agent-sandbox's, kopf's) as it is."""
    body = kube.get(kind, name, namespace)
    if body is None:
        return
    finalizers = [f for f in body["metadata"].get("finalizers") or [] if f != KEEP] + ([KEEP] if add else [])
    patch = {"metadata": {"finalizers": finalizers or None}}
    kube.run("patch", kind, name, "-n", namespace, "--type=merge", "-p", json.dumps(patch))


def _events(kube: Kube, name: str, namespace: str) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.list("events", namespace)
        if e.get("involvedObject", {}).get("kind") == "AgentSession" and e["involvedObject"].get("name") == name
    ]


def _condition(kube: Kube, name: str, namespace: str, ctype: str) -> dict[str, Any]:
    return next((c for c in status_of(kube, name, namespace).get("conditions") or [] if c["type"] == ctype), {})


def test_a_deleted_session_kept_by_a_foreign_finalizer_stops_and_keeps_its_place(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Attack: maxSessionsPerLabel 1; the tenant puts its own finalizer on its Ready session (and, to keep
    the claim around long enough to look at, on the claim too) and deletes the session. Now: the operator
    deletes the claim at once (the claim's own finalizer then holds it: its Sandbox is suspended), the
    session is Terminating with an Event saying so, and a second session is refused while the claim
    exists. Once the claim is gone the place frees and the second session runs; the session object
    lingers (its finalizer is the tenant's business, never removed by the operator)."""
    first_of_a_capped_team(kube, namespace)
    status = status_of(kube, "first", namespace)
    claim_name, sandbox_name = status["claimName"], status["sandboxName"]
    second = manifests.session("second", "pool", {"team": "a"})
    try:
        _set_finalizers(kube, "agentsession", "first", namespace, add=True)
        _set_finalizers(kube, "sandboxclaim", claim_name, namespace, add=True)
        kube.run("delete", "agentsession", "first", "-n", namespace, "--wait=false")

        # The operator deleted the claim (before: nobody did, and the sandbox ran on for good).
        kube.wait_for(
            "the operator to delete the claim",
            lambda: ((kube.get("sandboxclaim", claim_name, namespace) or {}).get("metadata") or {}).get(
                "deletionTimestamp"
            ),
            timeout=30,
        )
        kube.wait_for(
            "the lingering claim's Sandbox suspended",
            lambda: (
                (kube.get("sandbox", sandbox_name, namespace) or {"spec": {"operatingMode": "Suspended"}})["spec"].get(
                    "operatingMode"
                )
                == "Suspended"
            ),
            timeout=30,
        )
        assert status_of(kube, "first", namespace).get("phase") == "Terminating"
        reasons = {e.get("reason") for e in _events(kube, "first", namespace)}
        assert "Deleting" in reasons, reasons

        # Its place is held while the claim exists (before: freed by the deletionTimestamp alone).
        refused = refusal(kube, second, namespace) or ""
        assert REFUSED in refused and "first" in refused, refused

        # The claim goes (its finalizer removed): the Sandbox with it, and the place frees.
        _set_finalizers(kube, "sandboxclaim", claim_name, namespace, add=False)
        kube.wait_for("the claim gone", lambda: kube.get("sandboxclaim", claim_name, namespace) is None, timeout=30)
        kube.wait_for("the Sandbox gone", lambda: kube.get("sandbox", sandbox_name, namespace) is None, timeout=60)
        kube.wait_for(
            "ClaimCreated False on the lingering session",
            lambda: _condition(kube, "first", namespace, "ClaimCreated").get("status") == "False",
            timeout=30,
        )
        body = kube.get("agentsession", "first", namespace)
        assert body is not None and KEEP in body["metadata"]["finalizers"]  # never the operator's to remove
        kube.wait_for("second admitted", lambda: refusal(kube, second, namespace) is None, timeout=30, interval=1)
        kube.wait_for("second Ready", lambda: status_of(kube, "second", namespace).get("phase") == "Ready", timeout=90)
    finally:
        _set_finalizers(kube, "sandboxclaim", claim_name, namespace, add=False)
        _set_finalizers(kube, "agentsession", "first", namespace, add=False)
