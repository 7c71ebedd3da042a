"""reconcile_actions: what a handler does in each situation."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from agentsession_operator.decisions.actions import (
    CreateClaim,
    DeleteClaim,
    PatchClaim,
    PatchSandbox,
    PatchStatus,
    ScheduleCheck,
    patch_changes,
    reconcile_actions,
)
from agentsession_operator.decisions.policy_merge import merge_policies

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
Make = Callable[..., dict[str, Any]]


def kinds(actions: list[Any]) -> list[str]:
    return [type(a).__name__ for a in actions]


def status_of(actions: list[Any]) -> dict[str, Any]:
    (patch,) = [a for a in actions if isinstance(a, PatchStatus)]
    return patch.patch


def ready_claim(make_claim: Make, **kwargs: Any) -> dict[str, Any]:
    return make_claim(
        **{"sandbox_name": "demo", "ready": ("True", "DependenciesReady", ""), "pod_ips": ["127.1.0.5"], **kwargs}
    )


def settle(session: dict[str, Any], actions: list[Any]) -> dict[str, Any]:
    """The session after the status patch was applied (None values dropped, as the API server does)."""
    if not any(isinstance(a, PatchStatus) for a in actions):
        return session
    patch = status_of(actions)
    return {**session, "status": {k: v for k, v in patch.items() if v is not None}}


def test_new_session_creates_claim(make_session: Make) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "ttl": "2h"})
    actions = reconcile_actions(session, None, None, T0)
    assert kinds(actions) == ["CreateClaim", "PatchStatus", "ScheduleCheck"]
    create = actions[0]
    assert isinstance(create, CreateClaim)
    assert create.manifest["metadata"]["name"] == "demo"
    assert create.manifest["spec"]["lifecycle"]["shutdownTime"] == "2025-01-01T13:00:00Z"
    assert status_of(actions)["phase"] == "Pending"
    # The first deadline: the ExpiringSoon warning, 10 minutes before the TTL ends (then the TTL itself).
    assert actions[-1] == ScheduleCheck(datetime(2025, 1, 1, 12, 50, tzinfo=UTC), "ExpiringSoon")
    quiet = reconcile_actions(session, None, None, T0, expiry_lead=None)
    assert quiet[-1] == ScheduleCheck(datetime(2025, 1, 1, 13, 0, tzinfo=UTC), "TTLExpired")


def test_no_claim_without_pool(make_session: Make) -> None:
    actions = reconcile_actions(make_session(spec={}), None, None, T0)
    assert kinds(actions) == ["PatchStatus"]
    assert status_of(actions)["phase"] == "Pending"


def test_policy_default_pool_is_used(make_session: Make, make_policy: Make) -> None:
    effective = merge_policies([make_policy("p", {"defaults": {"warmPoolRef": {"name": "dflt"}}})])
    actions = reconcile_actions(make_session(spec={}), None, None, T0, effective=effective)
    assert isinstance(actions[0], CreateClaim)
    assert actions[0].manifest["spec"]["warmPoolRef"] == {"name": "dflt"}


def test_no_claim_when_pool_missing_or_violations(make_session: Make) -> None:
    assert kinds(reconcile_actions(make_session(), None, None, T0, warm_pool_exists=False)) == ["PatchStatus"]
    actions = reconcile_actions(make_session(), None, None, T0, violations=["bad"])
    assert kinds(actions) == ["PatchStatus"]
    assert status_of(actions)["phase"] == "Failed"


def test_recovers_after_violation_fixed_in_one_pass(make_session: Make) -> None:
    failed = settle(make_session(), reconcile_actions(make_session(), None, None, T0, violations=["bad"]))
    actions = reconcile_actions(failed, None, None, T0 + timedelta(seconds=5), violations=[])
    assert kinds(actions)[:2] == ["CreateClaim", "PatchStatus"]


def test_never_create_after_expiry(make_session: Make) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "ttl": "30m"})
    actions = reconcile_actions(session, None, None, T0)
    assert kinds(actions) == ["PatchStatus"]
    assert status_of(actions)["phase"] == "Expired"


def test_expired_deletes_the_claim_once(make_session: Make, make_claim: Make) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "ttl": "1h"})
    actions = reconcile_actions(session, ready_claim(make_claim), None, T0)
    assert actions[0] == DeleteClaim("demo", "TTLExpired")
    settled = settle(session, actions)
    assert kinds(reconcile_actions(settled, ready_claim(make_claim, deleting=True), None, T0)) == []
    after = reconcile_actions(settled, None, None, T0 + timedelta(seconds=1))
    assert "CreateClaim" not in kinds(after) and "DeleteClaim" not in kinds(after)


def test_idle_delete(make_session: Make, make_claim: Make) -> None:
    spec = {"warmPoolRef": {"name": "p"}, "idleTimeout": "15m"}
    first = reconcile_actions(make_session(spec=spec), ready_claim(make_claim), None, T0)
    assert first[-1] == ScheduleCheck(T0 + timedelta(minutes=15), "IdleTimeout")
    session = settle(make_session(spec=spec), first)
    later = reconcile_actions(session, ready_claim(make_claim), None, T0 + timedelta(minutes=16))
    assert later[0] == DeleteClaim("demo", "IdleTimeout")
    assert status_of(later)["phase"] == "Expired"


def test_idle_suspend_and_resume(make_session: Make, make_claim: Make, make_sandbox: Make) -> None:
    spec = {"warmPoolRef": {"name": "p"}, "idleTimeout": "15m", "idleAction": "Suspend"}
    session = settle(
        make_session(spec=spec), reconcile_actions(make_session(spec=spec), ready_claim(make_claim), make_sandbox(), T0)
    )
    idle = reconcile_actions(session, ready_claim(make_claim), make_sandbox(), T0 + timedelta(minutes=20))
    assert PatchSandbox("demo", {"spec": {"operatingMode": "Suspended"}}) in idle
    suspended_claim = make_claim(sandbox_name="demo", ready=("False", "SandboxSuspended", "suspended"))
    session = settle(session, idle)
    quiet = reconcile_actions(session, suspended_claim, make_sandbox(mode="Suspended"), T0 + timedelta(minutes=21))
    assert status_of(quiet)["phase"] == "Suspended"
    assert not [a for a in quiet if isinstance(a, PatchSandbox)]
    session = settle(session, quiet)
    session["status"]["lastActivityTime"] = "2025-01-01T12:30:00Z"  # the activity handler recorded a client call
    # Still terminating the old Pod: the resume waits (else its final phase would read as the new Pod's).
    terminating = make_sandbox(mode="Suspended")
    terminating["status"] = {"conditions": [{"type": "Suspended", "status": "False", "reason": "PodTerminating"}]}
    early = reconcile_actions(session, suspended_claim, terminating, T0 + timedelta(minutes=30))
    assert not [a for a in early if isinstance(a, PatchSandbox)]
    gone = make_sandbox(mode="Suspended")
    gone["status"] = {"conditions": [{"type": "Suspended", "status": "True", "reason": "PodTerminated"}]}
    woken = reconcile_actions(session, suspended_claim, gone, T0 + timedelta(minutes=30))
    assert PatchSandbox("demo", {"spec": {"operatingMode": "Running"}}) in woken


def test_spec_suspend(make_session: Make, make_claim: Make, make_sandbox: Make) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "suspend": True})
    actions = reconcile_actions(session, ready_claim(make_claim), make_sandbox(), T0)
    assert PatchSandbox("demo", {"spec": {"operatingMode": "Suspended"}}) in actions


def test_sandbox_not_owned_by_claim_is_never_patched(make_session: Make, make_claim: Make, make_sandbox: Make) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "suspend": True})
    actions = reconcile_actions(session, ready_claim(make_claim), make_sandbox(owner_uid="stranger"), T0)
    assert not [a for a in actions if isinstance(a, PatchSandbox)]


def test_ttl_change_moves_shutdown_time(make_session: Make, make_claim: Make) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "ttl": "3h"})
    claim = ready_claim(make_claim, shutdown_time="2025-01-01T13:00:00Z")
    actions = reconcile_actions(session, claim, None, T0)
    assert PatchClaim("demo", {"spec": {"lifecycle": {"shutdownTime": "2025-01-01T14:00:00Z"}}}) in actions
    same = ready_claim(make_claim, shutdown_time="2025-01-01T14:00:00Z")
    assert not [a for a in reconcile_actions(session, same, None, T0) if isinstance(a, PatchClaim)]


def test_foreign_claim_is_left_alone(make_session: Make, make_claim: Make) -> None:
    actions = reconcile_actions(make_session(), make_claim(owner_uid="other"), None, T0)
    assert kinds(actions) == ["PatchStatus"]
    assert status_of(actions)["phase"] == "Failed"


def test_failed_claim_is_kept(make_session: Make, make_claim: Make) -> None:
    actions = reconcile_actions(make_session(), make_claim(ready=("False", "PodFailed", "x")), None, T0)
    assert kinds(actions) == ["PatchStatus"]


def test_a_deleting_session_has_its_claim_deleted_at_once(make_session: Make, make_claim: Make) -> None:
    """Issue 28 item 5: a tenant's own finalizer keeps a deleted session's object, so the garbage collector
    never takes its claim: the operator deletes it as soon as deletionTimestamp is set (desired: no claim)."""
    actions = reconcile_actions(make_session(deleting=True), ready_claim(make_claim), None, T0)
    assert kinds(actions) == ["DeleteClaim", "PatchStatus"]
    (delete,) = [a for a in actions if isinstance(a, DeleteClaim)]
    assert delete.name == "demo" and delete.reason == "Deleting"
    assert status_of(actions)["phase"] == "Terminating"


def test_terminating_with_its_claim_going_suspends_what_still_runs(
    make_session: Make, make_claim: Make, make_sandbox: Make
) -> None:
    """A claim kept by a finalizer after the operator deleted it: its Sandbox is suspended, nothing else."""
    going = ready_claim(make_claim, deleting=True)
    actions = reconcile_actions(make_session(deleting=True), going, make_sandbox(), T0)
    assert kinds(actions) == ["PatchSandbox", "PatchStatus"]
    assert PatchSandbox("demo", {"spec": {"operatingMode": "Suspended"}}) in actions
    actions = reconcile_actions(make_session(deleting=True), going, make_sandbox(mode="Suspended"), T0)
    assert kinds(actions) == ["PatchStatus"]
    assert status_of(actions)["phase"] == "Terminating"
    foreign = reconcile_actions(make_session(deleting=True), make_claim(owner_uid="other"), None, T0)
    assert "DeleteClaim" not in kinds(foreign)  # never someone else's claim


def test_steady_state_writes_nothing(make_session: Make, make_claim: Make) -> None:
    session = make_session()
    session = settle(session, reconcile_actions(session, ready_claim(make_claim), None, T0))
    assert reconcile_actions(session, ready_claim(make_claim), None, T0 + timedelta(minutes=1)) == []


def test_patch_changes() -> None:
    assert not patch_changes({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 2, "d": None}, "e": None})
    assert patch_changes({"a": 1}, {"a": 2})
    assert patch_changes({"a": 1}, {"a": None})
    assert patch_changes({"b": {"c": 2}}, {"b": {"c": 3}})
    assert patch_changes({"l": [1]}, {"l": [1, 2]})
    assert patch_changes({"b": 1}, {"b": {"c": 1}})


def test_idle_hibernate_checkpoints_then_wakes_restoring_then_clears(
    make_session: Make, make_claim: Make, make_sandbox: Make
) -> None:
    """idleAction Hibernate (issue 33): the idle suspend is a HibernateSandbox (checkpoint, then the same
    suspend); the wake of a session with a kept checkpoint carries the restore annotation; once Ready the
    annotation goes (a restart must not restore again) and the image is deleted (FinishRestore)."""
    from agentsession_api import names
    from agentsession_operator.decisions.actions import FinishRestore, HibernateSandbox
    from agentsession_operator.decisions.hibernate import checkpoint_name, pod_spec_digest

    spec = {"warmPoolRef": {"name": "p"}, "idleTimeout": "15m", "idleAction": "Hibernate"}
    session = settle(
        make_session(spec=spec), reconcile_actions(make_session(spec=spec), ready_claim(make_claim), make_sandbox(), T0)
    )
    idle = reconcile_actions(session, ready_claim(make_claim), make_sandbox(), T0 + timedelta(minutes=20))
    (hib,) = [a for a in idle if isinstance(a, HibernateSandbox)]
    meta = session["metadata"]
    taken_at = "2025-01-01T12:20:00Z"  # the pass's time: the record's takenAt, which names the image
    assert hib == HibernateSandbox(
        "demo",
        "demo",
        checkpoint_name(meta["name"], meta["uid"], taken_at),
        {"spec": {"operatingMode": "Suspended"}},
        taken_at=taken_at,
        pod_spec_digest=pod_spec_digest(make_sandbox()),  # what the wake compares its pod spec with
    )
    assert not [a for a in idle if isinstance(a, PatchSandbox)]
    session = settle(session, idle)
    session["status"]["hibernation"] = {
        "hibernated": True,
        "reason": "Checkpointed",
        "checkpoint": hib.checkpoint,
        "sizeBytes": 4_000_000,
        "takenAt": "2025-01-01T12:20:00Z",
    }
    # The next pass sees the record before the Sandbox's suspend (a stale cache): suspend, no new checkpoint.
    again = reconcile_actions(session, ready_claim(make_claim), make_sandbox(), T0 + timedelta(minutes=20))
    assert not [a for a in again if isinstance(a, HibernateSandbox)]
    assert PatchSandbox("demo", {"spec": {"operatingMode": "Suspended"}}) in again
    session["status"]["lastActivityTime"] = "2025-01-01T12:30:00Z"
    suspended_claim = make_claim(sandbox_name="demo", ready=("False", "SandboxSuspended", "suspended"))
    gone = make_sandbox(mode="Suspended")
    gone["status"] = {"conditions": [{"type": "Suspended", "status": "True", "reason": "PodTerminated"}]}
    session["status"]["phase"] = "Suspended"
    woken = reconcile_actions(session, suspended_claim, gone, T0 + timedelta(minutes=30))
    restore = {"metadata": {"annotations": {names.ANNOTATION_RESTORE_FROM: hib.checkpoint}}}
    claim_name = suspended_claim["metadata"]["name"]
    # The claim first: agent-sandbox's claim controller keeps the Sandbox's pod metadata equal to the
    # template's plus the claim's, so the annotation named on the Sandbox alone would be dropped again.
    on_claim = {"spec": {"additionalPodMetadata": {"annotations": {names.ANNOTATION_RESTORE_FROM: hib.checkpoint}}}}
    resume = PatchSandbox("demo", {"spec": {"operatingMode": "Running", "podTemplate": restore}})
    assert PatchClaim(claim_name, on_claim) in woken and resume in woken
    assert woken.index(PatchClaim(claim_name, on_claim)) < woken.index(resume)
    running = make_sandbox()
    running["spec"]["podTemplate"] = restore
    carrying = ready_claim(make_claim)
    carrying["spec"]["additionalPodMetadata"] = {"annotations": {names.ANNOTATION_RESTORE_FROM: hib.checkpoint}}
    up = reconcile_actions(session, carrying, running, T0 + timedelta(minutes=31))
    cleared = {"spec": {"podTemplate": {"metadata": {"annotations": {names.ANNOTATION_RESTORE_FROM: None}}}}}
    off_claim = {"spec": {"additionalPodMetadata": {"annotations": {names.ANNOTATION_RESTORE_FROM: None}}}}
    assert up.index(PatchClaim(claim_name, off_claim)) < up.index(PatchSandbox("demo", cleared))
    (finish,) = [a for a in up if isinstance(a, FinishRestore)]
    assert finish.checkpoint == hib.checkpoint and finish.record["reason"] == "Restored"
    assert finish.record["hibernated"] is False and "4000000 bytes" in finish.record["message"]
    # The claim controller has already dropped it from the Sandbox (the claim cleared): still finished.
    reverted = reconcile_actions(session, ready_claim(make_claim), make_sandbox(), T0 + timedelta(minutes=31))
    assert [a for a in reverted if isinstance(a, FinishRestore)] == [finish]
    assert PatchSandbox("demo", cleared) not in reverted and PatchClaim(claim_name, off_claim) not in reverted
    # A pass that recorded the wake but failed to clear the claim: the claim's goes, the record stands.
    session["status"]["hibernation"] = {**finish.record, "reason": "RestoreFailed"}
    left = reconcile_actions(session, carrying, make_sandbox(), T0 + timedelta(minutes=32))
    assert PatchClaim(claim_name, off_claim) in left
    assert not [a for a in left if isinstance(a, FinishRestore)]  # the RestoreFailed record stands


def test_spec_suspend_under_hibernate_is_a_plain_suspend(
    make_session: Make, make_claim: Make, make_sandbox: Make
) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "idleAction": "Hibernate", "suspend": True})
    actions = reconcile_actions(session, ready_claim(make_claim), make_sandbox(), T0)
    assert PatchSandbox("demo", {"spec": {"operatingMode": "Suspended"}}) in actions


def test_an_ended_session_with_a_kept_checkpoint_forgets_it(
    make_session: Make, make_claim: Make, make_sandbox: Make
) -> None:
    """Issue 33: a session deleted (a finalizer keeps it) or expired while hibernated has its image deleted."""
    from agentsession_operator.decisions.actions import ForgetCheckpoint
    from agentsession_operator.decisions.hibernate import checkpoint_name

    spec = {"warmPoolRef": {"name": "p"}, "idleAction": "Hibernate"}
    deleting = make_session(spec=spec)
    own = checkpoint_name(deleting["metadata"]["name"], deleting["metadata"]["uid"])
    hibernation = {"hibernated": True, "reason": "Checkpointed", "checkpoint": own}
    deleting["metadata"]["deletionTimestamp"] = "2025-01-01T12:00:00Z"
    deleting["status"] = {"phase": "Suspended", "hibernation": hibernation}
    actions = reconcile_actions(deleting, ready_claim(make_claim), make_sandbox(), T0)
    assert ForgetCheckpoint(own) in actions
    expired = make_session(spec={**spec, "ttl": "1m"})
    expired["status"] = {"phase": "Suspended", "hibernation": hibernation}
    actions = reconcile_actions(expired, ready_claim(make_claim), make_sandbox(), T0 + timedelta(hours=1))
    assert ForgetCheckpoint(own) in actions
    # Not while it lives, nor once the image is gone.
    alive = make_session(spec=spec)
    alive["status"] = {"phase": "Suspended", "hibernation": hibernation}
    assert not [
        a for a in reconcile_actions(alive, ready_claim(make_claim), None, T0) if isinstance(a, ForgetCheckpoint)
    ]
    deleting["status"]["hibernation"] = {"hibernated": False, "reason": "CheckpointDeleted"}
    actions = reconcile_actions(deleting, ready_claim(make_claim), make_sandbox(), T0)
    assert not [a for a in actions if isinstance(a, ForgetCheckpoint)]


def test_a_forged_checkpoint_in_the_status_restores_nothing(
    make_session: Make, make_claim: Make, make_sandbox: Make
) -> None:
    """Attack (issue 49 item 1, in depth): status.hibernation.checkpoint names another session's image (a
    valid name, readable in that session's status; written by whoever may patch the status subresource).
    Before: the wake named it on the claim and the Sandbox, restoring the other session's memory. Now the
    wake recomputes the name from the session's own name and UID and restores only that one: a forged name
    wakes the session fresh (a plain resume), and the image is not this session's to delete."""
    from agentsession_api import names
    from agentsession_operator.decisions.hibernate import checkpoint_name, checkpoint_to_forget

    spec = {"warmPoolRef": {"name": "p"}, "idleTimeout": "15m", "idleAction": "Hibernate"}
    session = make_session(spec=spec)
    victim = checkpoint_name("victim", "0f1e2d3c-0000-4000-8000-000000000000")
    session["status"] = {
        "phase": "Suspended",
        "lastActivityTime": "2025-01-01T12:30:00Z",
        "hibernation": {"hibernated": True, "reason": "Checkpointed", "checkpoint": victim, "sizeBytes": 1},
    }
    suspended_claim = make_claim(sandbox_name="demo", ready=("False", "SandboxSuspended", "suspended"))
    gone = make_sandbox(mode="Suspended")
    gone["status"] = {"conditions": [{"type": "Suspended", "status": "True", "reason": "PodTerminated"}]}
    woken = reconcile_actions(session, suspended_claim, gone, T0 + timedelta(minutes=30))
    assert victim not in repr(woken), woken
    assert PatchSandbox("demo", {"spec": {"operatingMode": "Running"}}) in woken
    assert not [a for a in woken if isinstance(a, PatchClaim) and names.ANNOTATION_RESTORE_FROM in repr(a)]
    assert checkpoint_to_forget(session) is None
