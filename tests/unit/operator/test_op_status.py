"""compute_status: phase mapping for every upstream reason, stickiness, conditions, idle and pod fields."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentsession_operator.decisions import status as status_module
from agentsession_operator.decisions.conditions import find_condition
from agentsession_operator.decisions.policy_resolve import resolve
from agentsession_operator.decisions.resolved import Resolved
from agentsession_operator.decisions.status import TERMINAL_CLAIM_REASONS
from agentsession_operator.decisions.status import compute_status as judged_status


def compute_status(
    session: dict[str, Any],
    claim: dict[str, Any] | None,
    sandbox: dict[str, Any] | None,
    now: datetime,
    warm_pool_exists: bool = True,
    **kwargs: Any,
) -> dict[str, Any]:
    """The status under no policy: these tests judge the session's own values (resolved explicitly here,
    as compute_status itself never defaults it)."""
    kwargs.setdefault("resolved", resolve(session, now=now))
    return judged_status(session, claim, sandbox, now, warm_pool_exists, **kwargs)


T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
Make = Callable[..., dict[str, Any]]


def cond(status: dict[str, Any], type_: str) -> dict[str, Any]:
    found = find_condition(status["conditions"], type_)
    assert found is not None, type_
    return found


def ready_claim(make_claim: Make, **kwargs: Any) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "sandbox_name": "demo",
        "ready": ("True", "DependenciesReady", "Pod is Ready"),
        "pod_ips": ["127.1.0.5"],
    }
    return make_claim(**{**defaults, **kwargs})


def test_a_condition_keeps_its_transition_time_until_its_status_changes() -> None:
    later = T0 + timedelta(minutes=5)
    first = status_module.set_condition(None, "Ready", False, "ClaimPending", "waiting", T0, 1)
    same = status_module.set_condition(first, "Ready", False, "SandboxNotReady", "still waiting", later, 2)
    flipped = status_module.set_condition(same, "Ready", True, "SandboxReady", "ready", later, 2)
    assert same[0]["lastTransitionTime"] == "2025-01-01T12:00:00Z"  # same status: the transition stands
    assert same[0]["reason"] == "SandboxNotReady" and same[0]["observedGeneration"] == 2
    assert flipped[0]["lastTransitionTime"] == "2025-01-01T12:05:00Z" and flipped[0]["status"] == "True"
    assert first[0]["status"] == "False"  # the input list is never changed


# --- Pending: before any claim ----------------------------------------------------------------------
def test_pending_while_claim_is_created(make_session: Make) -> None:
    result = compute_status(make_session(), None, None, T0, True)
    assert result["phase"] == "Pending"
    assert cond(result, "Ready")["reason"] == "ClaimPending"
    assert cond(result, "ClaimCreated")["status"] == "False"
    assert cond(result, "Expired")["status"] == "False"
    assert cond(result, "Failed")["status"] == "False"
    assert find_condition(result["conditions"], "PolicyCompliant") is None
    assert result["claimName"] is None and result["podIPs"] is None
    assert result["observedGeneration"] == 1
    assert result["resolved"] == {
        "warmPoolRef": {"name": "python-pool"},
        "ttl": None,
        "idleTimeout": None,
        "idleAction": "Delete",
        "maxTtl": None,
        "maxIdleTimeout": None,
        "pendingMaxTtl": None,
        "pendingMaxTtlAt": None,
    }


def test_missing_warm_pool_names_it(make_session: Make) -> None:
    result = compute_status(make_session(), None, None, T0, False)
    assert result["phase"] == "Pending"
    ready = cond(result, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "WarmPoolNotFound"
    assert "python-pool" in ready["message"] and "ns" in ready["message"]


def test_no_warm_pool_at_all(make_session: Make) -> None:
    result = compute_status(make_session(spec={}), None, None, T0, True)
    assert result["phase"] == "Pending"
    assert cond(result, "Ready")["reason"] == "NoWarmPool"
    assert "spec.warmPoolRef" in cond(result, "Ready")["message"]


def test_policy_violation_fails_before_claim_but_recovers(make_session: Make) -> None:
    failed = compute_status(make_session(), None, None, T0, True, violations=["spec.ttl 5h exceeds 2h"])
    assert failed["phase"] == "Failed"
    assert cond(failed, "Failed")["reason"] == "PolicyViolation"
    assert cond(failed, "PolicyCompliant")["status"] == "False"
    assert "spec.ttl 5h exceeds 2h" in cond(failed, "PolicyCompliant")["message"]
    fixed = compute_status(make_session(status=failed), None, None, T0 + timedelta(minutes=1), True, violations=[])
    assert fixed["phase"] == "Pending"  # not sticky: the user fixed the spec
    assert cond(fixed, "PolicyCompliant")["status"] == "True"
    assert cond(fixed, "Failed")["status"] == "False"


def test_foreign_claim_is_a_conflict(make_session: Make, make_claim: Make) -> None:
    foreign = make_claim(owner_uid="someone-else", sandbox_name="demo", ready=("True", "DependenciesReady", ""))
    result = compute_status(make_session(), foreign, None, T0, True)
    assert result["phase"] == "Failed"
    assert cond(result, "Failed")["reason"] == "ClaimConflict"
    assert cond(result, "ClaimCreated")["reason"] == "ClaimConflict"
    assert result["claimName"] is None and result["podIPs"] is None  # nothing read from a claim we do not own


# --- Mapping of the claim's Ready condition ----------------------------------------------------------
@pytest.mark.parametrize("reason", sorted(TERMINAL_CLAIM_REASONS))
def test_terminal_reasons_fail_with_a_fix(make_session: Make, make_claim: Make, reason: str) -> None:
    claim = make_claim(sandbox_name="demo", ready=("False", reason, "upstream detail"))
    result = compute_status(make_session(), claim, None, T0, True)
    assert result["phase"] == "Failed"
    failed = cond(result, "Failed")
    assert failed["status"] == "True" and failed["reason"] == reason
    assert TERMINAL_CLAIM_REASONS[reason] in failed["message"]
    assert "upstream detail" in failed["message"]
    assert "delete and recreate" in failed["message"]
    assert cond(result, "Ready")["reason"] == reason


def test_invalid_metadata_message_says_what_to_fix(make_session: Make, make_claim: Make) -> None:
    claim = make_claim(ready=("False", "InvalidMetadata", 'label domain "x.io" is not in the allowlist'))
    message = cond(compute_status(make_session(), claim, None, T0, True), "Failed")["message"]
    assert "allowed-label-domains" in message and "sandbox.users.io" in message and "spec.podLabels" in message


@pytest.mark.parametrize("reason", ["ClaimExpired", "SandboxExpired"])
def test_upstream_expiry_maps_to_expired(make_session: Make, make_claim: Make, reason: str) -> None:
    claim = make_claim(sandbox_name="demo", ready=("False", reason, "expired"))
    result = compute_status(make_session(), claim, None, T0, True)
    assert result["phase"] == "Expired"
    assert cond(result, "Expired") | {} == cond(result, "Expired")
    assert cond(result, "Expired")["status"] == "True" and cond(result, "Expired")["reason"] == "TTLExpired"


def test_warm_pool_not_found_from_claim(make_session: Make, make_claim: Make) -> None:
    claim = make_claim(ready=("False", "WarmPoolNotFound", 'SandboxWarmPool "python-pool" not found'))
    result = compute_status(make_session(), claim, None, T0, True)
    assert result["phase"] == "Pending"
    assert cond(result, "Ready")["reason"] == "WarmPoolNotFound"
    assert "python-pool" in cond(result, "Ready")["message"]
    assert result["claimName"] == "demo"


def test_warm_pool_gone_with_claim(make_session: Make, make_claim: Make) -> None:
    claim = make_claim(ready=("False", "SandboxNotReady", "Sandbox is not ready"))
    result = compute_status(make_session(), claim, None, T0, False)
    assert result["phase"] == "Pending" and cond(result, "Ready")["reason"] == "WarmPoolNotFound"


@pytest.mark.parametrize(
    "ready",
    [
        None,
        ("False", "SandboxNotReady", "Sandbox is not ready"),
        ("False", "DependenciesNotReady", "Pod exists with phase: Pending"),
        ("False", "TemplateNotFound", "template x not found"),
        ("False", "ReconcilerError", "Error seen: boom"),
        ("False", "SandboxMissing", "Sandbox does not exist"),
        ("False", "AdoptionConflict", "retry"),
        ("False", "SandboxCreatePending", "waiting"),
        ("Unknown", "Whatever", ""),
    ],
)
def test_other_reasons_are_provisioning(make_session: Make, make_claim: Make, ready: Any) -> None:
    result = compute_status(make_session(), make_claim(ready=ready), None, T0, True)
    assert result["phase"] == "Provisioning"
    assert cond(result, "Ready")["status"] == "False"
    if ready is not None:
        assert cond(result, "Ready")["reason"] == ready[1]
        assert cond(result, "Ready")["message"] == (ready[2] or "waiting for agent-sandbox to provide a ready Sandbox")
    assert cond(result, "ClaimCreated")["status"] == "True"


def test_ready(make_session: Make, make_claim: Make, make_sandbox: Make) -> None:
    claim = ready_claim(make_claim, fqdn="demo.ns.svc.cluster.local")
    result = compute_status(make_session(), claim, make_sandbox(pod_ips=["127.1.0.5"]), T0, True)
    assert result["phase"] == "Ready"
    assert result["claimName"] == "demo"
    assert result["sandboxName"] == "demo" and result["podName"] == "demo"
    assert result["podIPs"] == ["127.1.0.5"]
    assert result["serviceFQDN"] == "demo.ns.svc.cluster.local"
    assert result["launchType"] == "cold"
    assert result["readyAt"] == "2025-01-01T12:00:00Z"
    assert result["lastActivityTime"] == "2025-01-01T12:00:00Z"  # becoming Ready counts as activity
    ready = cond(result, "Ready")
    assert ready["status"] == "True" and "127.1.0.5" in ready["message"]


def test_pod_ips_fall_back_to_sandbox(make_session: Make, make_claim: Make, make_sandbox: Make) -> None:
    claim = make_claim(sandbox_name="demo", ready=("True", "DependenciesReady", ""))
    sandbox = make_sandbox(pod_ips=["127.1.0.9"], fqdn="demo.ns.svc")
    result = compute_status(make_session(), claim, sandbox, T0, True)
    assert result["podIPs"] == ["127.1.0.9"] and result["serviceFQDN"] == "demo.ns.svc"


def test_warm_launch_from_pool(make_session: Make, make_claim: Make, make_sandbox: Make) -> None:
    claim = ready_claim(make_claim, sandbox_name="python-pool-abcde")
    result = compute_status(make_session(), claim, None, T0, True)
    assert result["launchType"] == "warm" and result["podName"] == "python-pool-abcde"
    labelled = compute_status(make_session(), ready_claim(make_claim), make_sandbox(launch="warm"), T0, True)
    assert labelled["launchType"] == "warm"  # agent-sandbox's own label wins


def test_an_adopted_sandbox_is_ready_only_once_agent_sandbox_acted_on_the_adoption(
    make_session: Make, make_claim: Make, make_sandbox: Make
) -> None:
    """Right after a warm-pool adoption the claim can say Ready while the Sandbox's Ready is still the
    pool's (observedGeneration 1 of generation 2): its Pod does not carry the claim's UID yet, so the
    session's NetworkPolicy does not select it and a client connecting then is refused (measured on the
    real node: about 1 s lost on half the adoptions). Ready waits for the Sandbox of the adoption."""
    claim = ready_claim(make_claim, sandbox_name="python-pool-abcde")
    adopted = make_sandbox("python-pool-abcde", launch="warm", generation=2, ready_generation=1)
    waiting = compute_status(make_session(), claim, adopted, T0, True)
    assert waiting["phase"] == "Provisioning"
    ready = cond(waiting, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "SandboxUpdating"
    assert "python-pool-abcde" in ready["message"] and "NetworkPolicy" in ready["message"]
    assert "readyAt" not in waiting or waiting["readyAt"] is None

    relabelled = make_sandbox("python-pool-abcde", launch="warm", generation=2, ready_generation=2)
    assert compute_status(make_session(), claim, relabelled, T0, True)["phase"] == "Ready"


def test_a_ready_session_stays_ready_while_its_sandbox_catches_up_with_a_spec_change(
    make_session: Make, make_claim: Make, make_sandbox: Make
) -> None:
    """The wait applies to becoming Ready only: a Sandbox spec change later (agent-sandbox's or ours) must
    not flap a Ready session."""
    claim = ready_claim(make_claim)
    first = compute_status(make_session(), claim, make_sandbox(generation=1, ready_generation=1), T0, True)
    assert first["phase"] == "Ready"
    lagging = make_sandbox(generation=3, ready_generation=1)
    assert compute_status(make_session(status=first), claim, lagging, T0, True)["phase"] == "Ready"


def test_unrelated_sandbox_is_ignored(make_session: Make, make_claim: Make, make_sandbox: Make) -> None:
    result = compute_status(make_session(), ready_claim(make_claim), make_sandbox("other", mode="Suspended"), T0, True)
    assert result["phase"] == "Ready"


def test_ready_at_is_set_once(make_session: Make, make_claim: Make) -> None:
    first = compute_status(make_session(), ready_claim(make_claim), None, T0, True)
    later = compute_status(make_session(status=first), ready_claim(make_claim), None, T0 + timedelta(hours=1), True)
    assert later["readyAt"] == "2025-01-01T12:00:00Z"
    assert cond(later, "Ready")["lastTransitionTime"] == "2025-01-01T12:00:00Z"


# --- Suspended ---------------------------------------------------------------------------------------
def test_suspended_by_spec(make_session: Make, make_claim: Make, make_sandbox: Make) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "suspend": True})
    claim = make_claim(sandbox_name="demo", ready=("False", "SandboxSuspended", "Sandbox is suspended"))
    result = compute_status(session, claim, make_sandbox(mode="Suspended"), T0, True)
    assert result["phase"] == "Suspended"
    assert cond(result, "Ready")["reason"] == "SuspendRequested"
    assert result["podIPs"] is None


def test_suspended_by_operating_mode_even_if_ready_lags(
    make_session: Make, make_claim: Make, make_sandbox: Make
) -> None:
    result = compute_status(make_session(), ready_claim(make_claim), make_sandbox(mode="Suspended"), T0, True)
    assert result["phase"] == "Suspended"


def test_suspended_by_idle(make_session: Make, make_claim: Make, make_sandbox: Make) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "idleTimeout": "15m", "idleAction": "Suspend"})
    claim = make_claim(sandbox_name="demo", ready=("False", "SandboxSuspended", "Sandbox is suspended"))
    result = compute_status(session, claim, make_sandbox(mode="Suspended"), T0, True)
    assert result["phase"] == "Suspended" and cond(result, "Ready")["reason"] == "IdleTimeout"


def test_hibernate_falls_back_to_suspend_and_says_why(make_session: Make, make_claim: Make, make_sandbox: Make) -> None:
    """No checkpoint can be taken yet (issue 33): idleAction Hibernate suspends exactly as Suspend (the
    workspace kept), and the condition Hibernated says it did not keep the memory, and why."""
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "idleTimeout": "15m", "idleAction": "Hibernate"})
    claim = make_claim(sandbox_name="demo", ready=("False", "SandboxSuspended", "Sandbox is suspended"))
    result = compute_status(session, claim, make_sandbox(mode="Suspended"), T0, True)
    assert result["phase"] == "Suspended" and cond(result, "Ready")["reason"] == "IdleTimeout"
    hibernated = cond(result, "Hibernated")
    assert hibernated["status"] == "False" and hibernated["reason"] == "HibernateUnavailable"
    assert "cannot checkpoint" in hibernated["message"] and "workspace volume kept" in hibernated["message"]
    # Ready, too: the condition says what the next idle timeout will do.
    assert cond(compute_status(session, ready_claim(make_claim), None, T0, True), "Hibernated")["status"] == "False"


def test_the_hibernated_condition_goes_with_idle_action_hibernate(make_session: Make, make_claim: Make) -> None:
    hibernating = make_session(spec={"warmPoolRef": {"name": "p"}, "idleAction": "Hibernate"})
    before = compute_status(hibernating, ready_claim(make_claim), None, T0, True)
    suspending = make_session(spec={"warmPoolRef": {"name": "p"}, "idleAction": "Suspend"}, status=before)
    after = compute_status(suspending, ready_claim(make_claim), None, T0, True)
    assert find_condition(after["conditions"], "Hibernated") is None


def test_resume_after_spec_suspend_counts_as_activity(make_session: Make, make_claim: Make) -> None:
    suspended_status = {
        "phase": "Suspended",
        "lastActivityTime": "2025-01-01T08:00:00Z",
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "SuspendRequested",
                "message": "",
                "lastTransitionTime": "2025-01-01T09:00:00Z",
            }
        ],
    }
    session = make_session(
        spec={"warmPoolRef": {"name": "p"}, "idleTimeout": "15m", "suspend": False}, status=suspended_status
    )
    claim = make_claim(sandbox_name="demo", ready=("False", "DependenciesNotReady", "Pod pending"))
    result = compute_status(session, claim, None, T0, True)
    assert result["phase"] == "Provisioning"  # not expired by an idle clock that ran while suspended
    assert result["lastActivityTime"] == "2025-01-01T12:00:00Z"


# --- Expiry ------------------------------------------------------------------------------------------
def test_ttl_expiry(make_session: Make, make_claim: Make) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "ttl": "1h"})  # created 11:00
    result = compute_status(session, ready_claim(make_claim), None, T0, True)
    assert result["phase"] == "Expired"
    expired = cond(result, "Expired")
    assert expired["status"] == "True" and expired["reason"] == "TTLExpired"
    assert "1h" in expired["message"]
    assert result["expiresAt"] == "2025-01-01T12:00:00Z"
    assert result["podIPs"] is None and result["idleDeadline"] is None
    assert cond(result, "Ready")["status"] == "False"


def test_expires_at_reported(make_session: Make) -> None:
    result = compute_status(make_session(spec={"warmPoolRef": {"name": "p"}, "ttl": "2h"}), None, None, T0, True)
    assert result["expiresAt"] == "2025-01-01T13:00:00Z"
    assert result["resolved"]["ttl"] == "2h"


def test_idle_timeout_with_delete_expires(make_session: Make, make_claim: Make) -> None:
    status = compute_status(
        make_session(spec={"warmPoolRef": {"name": "p"}, "idleTimeout": "15m"}), ready_claim(make_claim), None, T0, True
    )
    assert status["phase"] == "Ready" and status["idleDeadline"] == "2025-01-01T12:15:00Z"
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "idleTimeout": "15m"}, status=status)
    still = compute_status(session, ready_claim(make_claim), None, T0 + timedelta(minutes=14), True)
    assert still["phase"] == "Ready"
    gone = compute_status(session, ready_claim(make_claim), None, T0 + timedelta(minutes=15), True)
    assert gone["phase"] == "Expired"
    assert cond(gone, "Expired")["reason"] == "IdleTimeout"
    assert "15m" in cond(gone, "Expired")["message"]


def test_busy_until_holds_the_idle_clock(make_session: Make, make_claim: Make) -> None:
    status = compute_status(
        make_session(spec={"warmPoolRef": {"name": "p"}, "idleTimeout": "15m"}), ready_claim(make_claim), None, T0, True
    )
    status["busyUntil"] = "2025-01-01T13:00:00Z"
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "idleTimeout": "15m"}, status=status)
    result = compute_status(session, ready_claim(make_claim), None, T0 + timedelta(minutes=30), True)
    assert result["phase"] == "Ready"
    assert result["idleDeadline"] == "2025-01-01T13:15:00Z"
    assert result["busyUntil"] == "2025-01-01T13:00:00Z"


def test_idle_with_suspend_does_not_expire(make_session: Make, make_claim: Make) -> None:
    spec = {"warmPoolRef": {"name": "p"}, "idleTimeout": "15m", "idleAction": "Suspend"}
    status = compute_status(make_session(spec=spec), ready_claim(make_claim), None, T0, True)
    later = compute_status(
        make_session(spec=spec, status=status), ready_claim(make_claim), None, T0 + timedelta(hours=1), True
    )
    assert later["phase"] == "Ready"  # reconcile suspends the Sandbox; the phase follows what is observed


# --- Sticky terminal phases -------------------------------------------------------------------------
def test_expired_is_sticky(make_session: Make, make_claim: Make) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "ttl": "1h"})
    expired = compute_status(session, ready_claim(make_claim), None, T0, True)
    again = compute_status(
        make_session(spec={"warmPoolRef": {"name": "p"}, "ttl": "24h"}, status=expired),
        ready_claim(make_claim),
        None,
        T0 + timedelta(minutes=5),
        True,
    )
    assert again["phase"] == "Expired"
    assert cond(again, "Expired")["lastTransitionTime"] == "2025-01-01T12:00:00Z"
    gone = compute_status(make_session(status=again), None, None, T0 + timedelta(minutes=10), True)
    assert gone["phase"] == "Expired"
    assert gone["claimName"] == "demo"  # history kept after the claim is deleted
    assert cond(gone, "ClaimCreated")["status"] == "False" and cond(gone, "ClaimCreated")["reason"] == "ClaimGone"


def test_failed_from_agent_sandbox_is_sticky(make_session: Make, make_claim: Make) -> None:
    failed = compute_status(make_session(), make_claim(ready=("False", "PodFailed", "boom")), None, T0, True)
    recovered_claim = ready_claim(make_claim)
    again = compute_status(make_session(status=failed), recovered_claim, None, T0 + timedelta(minutes=1), True)
    assert again["phase"] == "Failed"
    assert cond(again, "Failed")["reason"] == "PodFailed"
    assert cond(again, "Failed")["lastTransitionTime"] == "2025-01-01T12:00:00Z"


def test_terminating(make_session: Make, make_claim: Make) -> None:
    result = compute_status(make_session(deleting=True), ready_claim(make_claim), None, T0, True)
    assert result["phase"] == "Terminating"
    assert result["podIPs"] is None


# --- Conditions over time ----------------------------------------------------------------------------
def test_condition_times_follow_status_changes(make_session: Make, make_claim: Make) -> None:
    pending = compute_status(make_session(), None, None, T0, True)
    provisioning = compute_status(
        make_session(status=pending),
        make_claim(ready=("False", "SandboxNotReady", "")),
        None,
        T0 + timedelta(seconds=5),
        True,
    )
    ready_time = cond(provisioning, "Ready")["lastTransitionTime"]
    assert ready_time == "2025-01-01T12:00:00Z"  # still False: time kept, reason updated
    assert cond(provisioning, "Ready")["reason"] == "SandboxNotReady"
    assert cond(provisioning, "ClaimCreated")["lastTransitionTime"] == "2025-01-01T12:00:05Z"
    ready = compute_status(
        make_session(status=provisioning), ready_claim(make_claim), None, T0 + timedelta(seconds=20), True
    )
    assert cond(ready, "Ready")["lastTransitionTime"] == "2025-01-01T12:00:20Z"
    assert cond(ready, "ClaimCreated")["lastTransitionTime"] == "2025-01-01T12:00:05Z"
    assert cond(ready, "Expired")["lastTransitionTime"] == "2025-01-01T12:00:00Z"


def test_observed_generation_everywhere(make_session: Make) -> None:
    result = compute_status(make_session(generation=7), None, None, T0, True)
    assert result["observedGeneration"] == 7
    assert {c["observedGeneration"] for c in result["conditions"]} == {7}


def test_resolved_values_in_status(make_session: Make) -> None:
    resolved = Resolved(
        warm_pool="pool-b", ttl=timedelta(hours=1), idle_timeout=timedelta(minutes=5), idle_action="Suspend"
    )
    result = compute_status(make_session(spec={}), None, None, T0, True, resolved=resolved)
    assert result["resolved"] == {
        "warmPoolRef": {"name": "pool-b"},
        "ttl": "1h",
        "idleTimeout": "5m",
        "idleAction": "Suspend",
        "maxTtl": None,
        "maxIdleTimeout": None,
        "pendingMaxTtl": None,
        "pendingMaxTtlAt": None,
    }
    assert result["expiresAt"] == "2025-01-01T12:00:00Z"


# --- The contract: what the operator writes is what the API (and so the client) reads ---------------
def test_written_status_is_a_valid_api_status(make_session: Make, make_claim: Make, make_sandbox: Make) -> None:
    from agentsession_api.types import AgentSessionStatus

    claim = ready_claim(make_claim)
    written = compute_status(make_session(), claim, make_sandbox(), T0, True, violations=[])
    status = AgentSessionStatus.model_validate({k: v for k, v in written.items() if v is not None})
    assert status.phase == written["phase"] and status.pod_ips == written["podIPs"]
    assert [c.type for c in status.conditions or []] == [c["type"] for c in written["conditions"]]


# --- A Ready session whose sandbox stops being ready (its runtime killed) -----------------------------
def test_ready_session_that_loses_its_sandbox_says_so_and_recovers(make_session: Make, make_claim: Make) -> None:
    ready = compute_status(make_session(), ready_claim(make_claim), None, T0, True)
    assert ready["phase"] == "Ready"
    lost_claim = ready_claim(make_claim, ready=("False", "DependenciesNotReady", "Pod is Running but not Ready"))
    lost = compute_status(make_session(status=ready), lost_claim, None, T0 + timedelta(seconds=5), True)
    assert lost["phase"] == "Provisioning"
    condition = cond(lost, "Ready")
    assert condition["status"] == "False" and condition["reason"] == "SandboxUnavailable"
    assert (
        "was ready and is not any more" in condition["message"]
        and "Pod is Running but not Ready" in condition["message"]
    )
    assert lost["readyAt"] == ready["readyAt"]  # the first Ready is kept
    # Still down on the next pass: the same reason (not "provisioning" as for a new session).
    again = compute_status(make_session(status=lost), lost_claim, None, T0 + timedelta(seconds=9), True)
    assert cond(again, "Ready")["reason"] == "SandboxUnavailable"
    back = compute_status(make_session(status=again), ready_claim(make_claim), None, T0 + timedelta(seconds=20), True)
    assert back["phase"] == "Ready" and cond(back, "Ready")["reason"] == "SandboxReady"


def test_a_new_session_waiting_for_its_sandbox_is_not_called_unavailable(make_session: Make, make_claim: Make) -> None:
    waiting = ready_claim(make_claim, ready=("False", "DependenciesNotReady", "Pod is not Ready"))
    result = compute_status(make_session(), waiting, None, T0, True)
    assert result["phase"] == "Provisioning" and cond(result, "Ready")["reason"] == "DependenciesNotReady"
