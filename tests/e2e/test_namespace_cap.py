"""Issue 28 item 2: one tenant can take the operator down for all. Sessions waiting on a missing warm pool
use no pod, so a pod ResourceQuota does not stop them, and nothing capped sessions per namespace: a tenant
could store tens of thousands of them, each cached by the operator. `cleanup.maxSessionsPerNamespace` is
such a cap that needs no label, enforced at admission (the webhook) and at every pass (the reconciler)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = pytest.mark.e2e

CAP = 2
REFUSED = "AgentSession refused by AgentSessionPolicy: "
SENTENCE = f"the policy maximum is {CAP} per namespace (AgentSessionPolicy cap, cleanup.maxSessionsPerNamespace)"


def cap_policy(selector: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"cleanup": {"maxSessionsPerNamespace": CAP}}
    if selector is not None:
        spec["selector"] = selector
    return {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSessionPolicy",
        "metadata": {"name": "cap"},
        "spec": spec,
    }


def create(kube: Kube, namespace: str, body: dict[str, Any], dry_run: bool = False) -> str | None:
    """The API server's error when it refuses ``body``, None when it stores it."""
    args = ["create", "-n", namespace, "-f", "-"] + (["--dry-run=server"] if dry_run else [])
    proc = kube.run(*args, input=json.dumps(body), check=False)
    return proc.stderr if proc.returncode != 0 else None


def waiting(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A session on a warm pool that does not exist: it waits, using no pod (what a pod quota misses)."""
    return manifests.session(name, "no-such-pool", labels, ttl="10m")


def test_sessions_over_the_namespace_cap_are_refused_whatever_their_labels(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """The attack: more waiting sessions in one namespace than the cap, each with a label of its own choosing
    (or none), past a policy that selects only team=a. Before the fix all were admitted (the policy's field did
    not exist); now the third is refused, naming the policy and the cap."""
    kube.apply(cap_policy({"matchLabels": {"team": "a"}}), namespace=namespace)
    policy = kube.get("agentsessionpolicy", "cap", namespace) or {}
    assert policy["spec"]["cleanup"].get("maxSessionsPerNamespace") == CAP, "the CRD pruned the field"
    kube.wait_for(
        "the webhook to know the policy",
        lambda: create(kube, namespace, waiting("probe"), dry_run=True) is None,  # under the cap: admitted
        timeout=60,
        interval=0.5,
    )
    assert create(kube, namespace, waiting("s1", {"team": "a"})) is None
    assert create(kube, namespace, waiting("s2")) is None
    error = create(kube, namespace, waiting("s3", {"team": "b"}))
    assert error is not None and REFUSED in error and SENTENCE in error, error
    assert "2 unfinished AgentSessions already hold a place in namespace" in error and "(s1, s2)" in error, error
    assert kube.get("agentsession", "s3", namespace) is None
    # A finished session gives its place up: once s1 is deleted, another fits.
    kube.run("delete", "agentsession", "s1", "-n", namespace, "--wait=true")
    kube.wait_for(
        "a place to free",
        lambda: create(kube, namespace, waiting("s4"), dry_run=True) is None,
        timeout=30,
        interval=0.5,
    )


def test_the_reconciler_holds_the_namespace_cap_for_sessions_stored_before_it(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """The backstop: sessions stored before the policy (or while no webhook answered) are ranked by creation;
    the first CAP go on, every later one waits (Failed, PolicyViolation, no claim), and moves up when a place
    ahead of it frees."""
    for name in ("s1", "s2", "s3"):
        assert create(kube, namespace, waiting(name)) is None
    kube.apply(cap_policy(), namespace=namespace)

    def reason(name: str) -> tuple[str | None, str]:
        status = (kube.get("agentsession", name, namespace) or {}).get("status") or {}
        failed = next((c for c in status.get("conditions") or [] if c.get("type") == "Failed"), {})
        return status.get("phase"), str(failed.get("message") or "")

    third = kube.wait_for(
        "s3 to wait for a place",
        lambda: (got := reason("s3"))[0] == "Failed" and SENTENCE in got[1] and got,
        timeout=60,
    )
    assert "(s1, s2)" in third[1], third
    for name in ("s1", "s2"):
        assert SENTENCE not in reason(name)[1], reason(name)
    assert not (kube.get("agentsession", "s3", namespace) or {}).get("status", {}).get("claimName")
    kube.run("delete", "agentsession", "s1", "-n", namespace, "--wait=true")
    kube.wait_for("s3 to move up", lambda: SENTENCE not in reason("s3")[1], timeout=60)
