"""Issue 49 item 7: an image belongs to one hibernation of one session, named by the wake and by nothing else."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from agentsession_operator.decisions.actions import HibernateSandbox, reconcile_actions
from tests.unit.operator.test_op_actions import ready_claim, settle

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
Make = Callable[..., dict[str, Any]]


def test_each_hibernation_has_an_image_of_its_own(make_session: Make, make_claim: Make, make_sandbox: Make) -> None:
    """Issue 49 item 7 (attack): a session hibernates on node A, wakes, and the image's delete misses node A
    (its agent down). It hibernates again later, on node B. Every image of a session had one name (its name
    and UID): the wake's pod, landing on node A, restored the stale first image there; and the sweep kept it
    (the live session owned that name). Each hibernation's image must have a name of its own, which the wake
    names, and the sweep must take the one the session no longer records."""
    from agentsession_operator.decisions import hibernate

    spec = {"warmPoolRef": {"name": "p"}, "idleTimeout": "15m", "idleAction": "Hibernate"}
    sandbox = make_sandbox()
    session = settle(
        make_session(spec=spec), reconcile_actions(make_session(spec=spec), ready_claim(make_claim), sandbox, T0)
    )
    hibernations, taken = [], []
    for later in (timedelta(minutes=20), timedelta(hours=2)):
        (action,) = [
            a
            for a in reconcile_actions(session, ready_claim(make_claim), sandbox, T0 + later)
            if isinstance(a, HibernateSandbox)
        ]
        hibernations.append(action.checkpoint)
        taken.append(action.taken_at)
    first, second = hibernations
    assert first != second, "two hibernations of one session wrote one image name: the stale one can be restored"
    recorded = {"hibernated": True, "reason": "Checkpointed", "checkpoint": second, "sizeBytes": 1, "takenAt": taken[1]}
    session = {**session, "status": {**session["status"], "hibernation": recorded}}
    assert hibernate.kept_checkpoint(session) == second  # the wake names the second, recomputed
    assert hibernate.images_to_sweep([("ns", first), ("ns", second)], {"ns": [session]}) == [("ns", first)]


def test_a_pod_spec_changed_while_the_session_slept_wakes_fresh(
    make_session: Make, make_claim: Make, make_sandbox: Make
) -> None:
    """Issue 49 item 7 (attack): a session hibernates; while it sleeps its pod spec is tightened (a read-only
    root filesystem, an env var gone, a smaller memory limit: an admin's fix, or the template's). runsc restores
    with spec validation at "warning" (a restored pod's cgroup parent always differs), so the woken sandbox ran
    the old processes with what the old spec gave them, and the tightening applied only at a fresh start. The
    image must be bound to the pod spec it was taken from: a wake into another spec starts fresh."""
    from agentsession_api import names

    spec = {"warmPoolRef": {"name": "p"}, "idleTimeout": "15m", "idleAction": "Hibernate"}
    sandbox = make_sandbox()
    session = settle(
        make_session(spec=spec), reconcile_actions(make_session(spec=spec), ready_claim(make_claim), sandbox, T0)
    )
    idle = reconcile_actions(session, ready_claim(make_claim), sandbox, T0 + timedelta(minutes=20))
    (hib,) = [a for a in idle if isinstance(a, HibernateSandbox)]
    session = settle(session, idle)
    recorded = {"hibernated": True, "reason": "Checkpointed", "checkpoint": hib.checkpoint, "sizeBytes": 1}
    recorded |= {"takenAt": hib.taken_at, "podSpecDigest": getattr(hib, "pod_spec_digest", None)}
    session["status"] |= {"hibernation": recorded, "phase": "Suspended", "lastActivityTime": "2025-01-01T12:30:00Z"}
    suspended_claim = make_claim(sandbox_name="demo", ready=("False", "SandboxSuspended", "suspended"))

    def wake(pod_spec_change: dict[str, Any]) -> list[Any]:
        gone = make_sandbox(mode="Suspended")
        gone["spec"]["podTemplate"].setdefault("spec", {}).update(pod_spec_change)
        gone["status"] = {"conditions": [{"type": "Suspended", "status": "True", "reason": "PodTerminated"}]}
        return reconcile_actions(session, suspended_claim, gone, T0 + timedelta(minutes=30))

    assert hib.checkpoint in repr(wake({})), "the same pod spec restores"
    tightened = wake({"securityContext": {"runAsNonRoot": True}, "automountServiceAccountToken": False})
    assert names.ANNOTATION_RESTORE_FROM not in repr(tightened), tightened
    assert any(getattr(a, "patch", None) == {"spec": {"operatingMode": "Running"}} for a in tightened), tightened
    # The image goes, and the record says why (condition Hibernated, a Warning Event PodSpecChanged).
    (finish,) = [a for a in tightened if type(a).__name__ == "FinishRestore"]
    assert finish.checkpoint == hib.checkpoint and finish.record["reason"] == "PodSpecChanged"
    assert finish.record["hibernated"] is False and "pod spec changed" in finish.record["message"]


def test_the_cached_sandbox_keeps_its_pod_specs_digest(make_sandbox: Make) -> None:
    """The cache drops a Sandbox's pod template (tenants size it): the wake's comparison must still see a change
    of the pod spec (the real-node run of the test above restored the old memory while the cache had only {})."""
    from agentsession_operator.decisions.hibernate import pod_spec_digest
    from agentsession_operator.kube.cache import Cache

    cache, key = Cache(), ("ns", "demo")
    sandbox = make_sandbox()
    cache.remember_sandbox(key, sandbox)
    assert "podTemplate" not in cache.sandboxes[key]["spec"]
    assert pod_spec_digest(cache.sandboxes[key]) == pod_spec_digest(sandbox)
    changed = make_sandbox()
    changed["spec"]["podTemplate"].setdefault("spec", {})["terminationGracePeriodSeconds"] = 7
    changed["metadata"]["resourceVersion"] = "999999"
    cache.remember_sandbox(key, changed)
    assert pod_spec_digest(cache.sandboxes[key]) == pod_spec_digest(changed) != pod_spec_digest(sandbox)
