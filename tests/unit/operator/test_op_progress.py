"""A new session's status is written once (Ready) when it is Ready within PROGRESS_DELAY of its creation, not
Provisioning first and then once per step agent-sandbox reports; a slower one shows Provisioning then."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from agentsession_operator.decisions.actions import PROGRESS_DELAY, PatchStatus, ScheduleCheck, reconcile_actions
from agentsession_operator.decisions.policy_resolve import resolve
from agentsession_operator.decisions.status import compute_status

Make = Callable[..., dict[str, Any]]
T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
SPEC = {"warmPoolRef": {"name": "pool"}, "idleTimeout": "8h"}


def _provisioning(make_session: Make, make_claim: Make) -> dict[str, Any]:
    """The session as the pass that created its claim wrote it (Provisioning, the claim without a status)."""
    session = make_session(spec=SPEC, created="2025-01-01T11:59:59Z")
    status = compute_status(session, make_claim(), None, T0, True, resolved=resolve(session))
    assert status["phase"] == "Provisioning"
    return make_session(spec=SPEC, created="2025-01-01T11:59:59Z", status=status)


def _patches(actions: list[Any]) -> list[PatchStatus]:
    return [a for a in actions if isinstance(a, PatchStatus)]


def test_a_new_session_s_first_status_waits_for_ready_or_the_delay(make_session: Make, make_claim: Make) -> None:
    created = T0 - timedelta(seconds=1)
    session = make_session(spec=SPEC, created="2025-01-01T11:59:59Z")
    claim = make_claim(sandbox_name="demo", ready=("False", "DependenciesNotReady", "Pod exists with phase: Pending"))
    for now in (T0, T0 + timedelta(seconds=5), created + PROGRESS_DELAY - timedelta(milliseconds=1)):
        actions = reconcile_actions(session, claim, None, now)
        assert _patches(actions) == []
        assert [a.at for a in actions if isinstance(a, ScheduleCheck)] == [created + PROGRESS_DELAY]
    (patch,) = _patches(reconcile_actions(session, claim, None, created + PROGRESS_DELAY))
    assert patch.patch["phase"] == "Provisioning" and patch.patch["claimName"] == claim["metadata"]["name"]
    ready = make_claim(sandbox_name="demo", pod_ips=["10.0.0.9"], ready=("True", "DependenciesReady", "Pod is Ready"))
    (patch,) = _patches(reconcile_actions(session, ready, None, T0))
    assert patch.patch["phase"] == "Ready" and patch.patch["claimName"] == ready["metadata"]["name"]


def test_a_new_session_s_other_verdicts_are_written_at_once(make_session: Make, make_claim: Make) -> None:
    """Only Provisioning waits: Pending (here: its warm pool is missing) says what to fix, now."""
    session = make_session(spec=SPEC, created="2025-01-01T11:59:59Z")
    (patch,) = _patches(reconcile_actions(session, None, None, T0, warm_pool_exists=False))
    assert patch.patch["phase"] == "Pending"


def test_progress_of_a_new_session_waits(make_session: Make, make_claim: Make) -> None:
    session = _provisioning(make_session, make_claim)
    steps = [
        make_claim(sandbox_name="demo", ready=("False", "SandboxNotReady", "Sandbox is not ready")),
        make_claim(sandbox_name="demo", ready=("False", "DependenciesNotReady", "Pod exists with phase: Pending")),
        make_claim(
            sandbox_name="demo", pod_ips=["10.0.0.9"], ready=("False", "DependenciesNotReady", "Pod is Running")
        ),
    ]
    for i, claim in enumerate(steps):
        actions = reconcile_actions(session, claim, None, T0 + timedelta(seconds=i + 1))
        assert _patches(actions) == []  # nothing written yet
        checks = [a for a in actions if isinstance(a, ScheduleCheck)]
        assert [c.at for c in checks] == [T0 + PROGRESS_DELAY]  # and looked at again then
    # Ready: written at once, with everything the steps brought.
    ready = make_claim(sandbox_name="demo", pod_ips=["10.0.0.9"], ready=("True", "DependenciesReady", "Pod is Ready"))
    (patch,) = _patches(reconcile_actions(session, ready, None, T0 + timedelta(seconds=2)))
    assert patch.patch["phase"] == "Ready" and patch.patch["podIPs"] == ["10.0.0.9"]


def test_a_slow_session_shows_its_latest_step_after_the_delay(make_session: Make, make_claim: Make) -> None:
    session = _provisioning(make_session, make_claim)
    claim = make_claim(sandbox_name="demo", ready=("False", "DependenciesNotReady", "Pod exists with phase: Pending"))
    (patch,) = _patches(reconcile_actions(session, claim, None, T0 + PROGRESS_DELAY))
    ready = next(c for c in patch.patch["conditions"] if c["type"] == "Ready")
    assert ready["message"] == "Pod exists with phase: Pending" and patch.patch["sandboxName"] == "demo"


def test_anything_but_progress_is_written_at_once(make_session: Make, make_claim: Make) -> None:
    session = _provisioning(make_session, make_claim)
    # The spec changed (a new generation): observedGeneration moves, written now.
    changed = {**session, "metadata": {**session["metadata"], "generation": 2}}
    claim = make_claim(sandbox_name="demo", ready=("False", "SandboxNotReady", "Sandbox is not ready"))
    assert _patches(reconcile_actions(changed, claim, None, T0 + timedelta(seconds=1)))
    # A claim agent-sandbox gave up on: Failed, written now.
    failed = make_claim(sandbox_name="demo", ready=("False", "PodFailed", "the pod failed"))
    (patch,) = _patches(reconcile_actions(session, failed, None, T0 + timedelta(seconds=1)))
    assert patch.patch["phase"] == "Failed"


def test_a_slower_session_waits_twice_as_long_for_each_later_step(make_session: Make, make_claim: Make) -> None:
    """Under load (250 sessions created at once) a session reported every step agent-sandbox made after
    the first few seconds: six status writes each. Each later progress write waits until the session
    has waited twice as long as at the last one: 15, 30, 60 s..."""
    session = _provisioning(make_session, make_claim)
    pending = make_claim(sandbox_name="demo", ready=("False", "DependenciesNotReady", "Pod exists with phase: Pending"))
    written = T0 + PROGRESS_DELAY + timedelta(seconds=1)  # the first progress, just after the delay
    (patch,) = _patches(reconcile_actions(session, pending, None, written))
    session = {**session, "status": patch.patch}
    flapped = make_claim(sandbox_name="demo", ready=("False", "SandboxNotReady", "Sandbox is not ready"))
    at = written + timedelta(seconds=2)  # the next step: waits until twice as long as at `written`
    actions = reconcile_actions(session, flapped, None, at, progress_written=written)
    assert _patches(actions) == []
    twice = T0 + 2 * (written - T0)
    assert [a.at for a in actions if isinstance(a, ScheduleCheck)] == [twice]
    (patch,) = _patches(reconcile_actions(session, flapped, None, twice, progress_written=written))
    assert next(c for c in patch.patch["conditions"] if c["type"] == "Ready")["reason"] == "SandboxNotReady"
    # Ready is never held back.
    ready = make_claim(sandbox_name="demo", pod_ips=["10.0.0.9"], ready=("True", "DependenciesReady", "Pod is Ready"))
    (patch,) = _patches(reconcile_actions(session, ready, None, at, progress_written=written))
    assert patch.patch["phase"] == "Ready"


def test_the_api_reference_states_the_delay() -> None:
    """`kubectl explain agentsession.status.phase` says how long a new session may show no phase."""
    from agentsession_api.types import AgentSessionStatus

    description = AgentSessionStatus.model_fields["phase"].description or ""
    assert f"provisioning for {int(PROGRESS_DELAY.total_seconds())} s" in description
