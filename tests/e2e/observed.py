"""Waits that prove the operator looked, for checks that something did NOT happen: instead of a fixed
sleep after a condition that was already true, a marker the operator moves only after it read the change."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import Kube


def wait_policy_seen(kube: Kube, name: str, namespace: str) -> None:
    """Until the operator has written this policy's status for its current generation: its cache holds
    the policy (the policy status is computed from that cache), so the next session is judged by it."""

    def seen() -> bool:
        body = kube.get("agentsessionpolicy", name, namespace) or {}
        generation = (body.get("metadata") or {}).get("generation")
        return generation is not None and (body.get("status") or {}).get("observedGeneration") == generation

    kube.wait_for(f"the operator to see policy {name}", seen, timeout=30, interval=0.2)


def wait_pass_after_now(kube: Kube, name: str, namespace: str) -> dict[str, Any]:
    """Until the operator has run a pass on the session as it is now, and return its status. Proves a
    "nothing happened" check looked: spec.idleAction set to its default (Delete) bumps metadata.generation
    without changing what the session does, and status.observedGeneration reaches the new generation only
    from a pass that read the session after every change made before this call."""
    before = (kube.get("agentsession", name, namespace) or {})["metadata"]["generation"]
    kube.run("patch", "agentsession", name, "-n", namespace, "--type=merge", "-p", '{"spec": {"idleAction": "Delete"}}')
    generation = (kube.get("agentsession", name, namespace) or {})["metadata"]["generation"]
    assert generation > before, f"{name} already had idleAction Delete: this marker works once per session"
    return kube.wait_for(
        f"a pass on {name} at generation {generation}",
        lambda: (
            (s := (kube.get("agentsession", name, namespace) or {}).get("status") or {}).get("observedGeneration", 0)
            >= generation
            and s
        ),
        timeout=30,
        interval=0.2,
    )
