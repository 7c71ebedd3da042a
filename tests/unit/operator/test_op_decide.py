"""decisions/decide.py: one pass from what was observed to every action and the status, with no I/O."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from agentsession_api import names, phases
from agentsession_operator.decisions import decide
from agentsession_operator.decisions.actions import ApplyNetworkPolicy, CreateClaim, ScheduleCheck

Make = Callable[..., dict[str, Any]]
POOL = "python-pool"


def test_a_new_session_gets_its_claim_and_one_resolve(make_session: Make, now: Any, resolves: list[int]) -> None:
    decision = decide.decide(decide.Observed(make_session(), None, None, now, pools={POOL}))
    assert [type(a) for a in decision.actions if isinstance(a, CreateClaim)] == [CreateClaim]
    assert decision.missing_pool is None and decision.resolved.warm_pool == POOL
    assert resolves[0] == 1


def test_a_pool_the_cache_lacks_is_named_for_the_shell_to_read(make_session: Make, now: Any) -> None:
    decision = decide.decide(decide.Observed(make_session(), None, None, now, pools=()))
    assert decision.missing_pool == POOL
    assert not [a for a in decision.actions if isinstance(a, CreateClaim)]
    assert (decision.status or {}).get("phase") == phases.Phase.PENDING


def test_a_running_session_is_never_asked_for_its_pool(make_session: Make, make_claim: Make, now: Any) -> None:
    decision = decide.decide(decide.Observed(make_session(), make_claim(), None, now, pools=()))
    assert decision.missing_pool is None


def test_an_activity_report_is_stamped_with_the_operator_clock_and_capped_busy(
    make_session: Make, make_claim: Make, make_policy: Make, now: Any, resolves: list[int]
) -> None:
    session = make_session()
    session["metadata"]["annotations"] = {names.ANNOTATION_ACTIVITY: "2020-01-01T00:00:00Z busy=7200"}
    capped = make_policy("p", {"limits": {"maxIdleTimeout": "30m"}})
    seen = decide.Observed(session, make_claim(), None, now, policies=[capped], pools={POOL})
    decision = decide.decide(seen)
    assert decision.activity["lastActivityTime"] == "2025-01-01T12:00:00Z"  # the operator's clock, not the report's
    assert decision.activity["busyUntil"] == "2025-01-01T12:30:00Z"  # busy=7200 capped by maxIdleTimeout
    assert decision.status is not None and decision.status["lastActivityReport"]
    assert resolves[0] == 1


def test_after_create_applies_the_network_policy_and_ignores_a_foreign_claim(
    make_session: Make, make_claim: Make, now: Any, resolves: list[int]
) -> None:
    decision = decide.decide(decide.Observed(make_session(), None, None, now, pools={POOL}))
    ours = decide.after_create(decision, make_claim())
    assert [type(a) for a in ours.actions if isinstance(a, ApplyNetworkPolicy)] == [ApplyNetworkPolicy]
    foreign = decide.after_create(decision, make_claim(owner_uid="someone-else"))
    assert foreign.actions == [] and foreign.status == decision.status
    assert resolves[0] == 1  # the round after the create reuses the pass's resolve


def test_a_refused_claim_write_says_why_on_the_planned_status(make_session: Make, now: Any) -> None:
    decision = decide.decide(decide.Observed(make_session(), None, None, now, pools={POOL}))
    patch = decide.refused(decision, "create", 403, "forbidden by a webhook")
    ready = next(c for c in patch["conditions"] if c["type"] == phases.COND_READY)
    assert ready["reason"] == "ClaimRefused" and "HTTP 403" in ready["message"]
    assert patch["phase"] == phases.Phase.PENDING


def test_a_fork_waiting_for_its_source_looks_again_soon(make_session: Make, now: Any) -> None:
    source = make_session("src", status={"phase": phases.Phase.PROVISIONING}, uid="src-uid")
    fork = make_session(spec={"forkFrom": {"name": "src"}})
    decision = decide.decide(decide.Observed(fork, None, None, now, fork_inputs=decide.ForkInputs(source)))
    checks = [a for a in decision.actions if isinstance(a, ScheduleCheck) and a.reason == decide.FORK_WAITING]
    assert [c.at for c in checks] == [now + decide.FORK_RETRY]
    assert not [a for a in decision.actions if isinstance(a, CreateClaim)]


def test_retention_deletes_a_finished_session_once_due(make_session: Make, make_policy: Make, now: Any) -> None:
    expired = {
        "phase": phases.Phase.EXPIRED,
        "conditions": [
            {
                "type": phases.COND_EXPIRED,
                "status": "True",
                "reason": "TTLExpired",
                "lastTransitionTime": "2025-01-01T10:00:00Z",
            }
        ],
    }
    session = make_session(status=expired)
    keep = make_policy("p", {"cleanup": {"deleteFinishedAfter": "1h"}})
    due = decide.decide(decide.Observed(session, None, None, now, policies=[keep], pools={POOL}))
    assert isinstance(due.retention, decide.DeleteSession) and due.retention.after == timedelta(hours=1)
    later = make_policy("p", {"cleanup": {"deleteFinishedAfter": "5h"}})
    waiting = decide.decide(decide.Observed(session, None, None, now, policies=[later], pools={POOL}))
    assert isinstance(waiting.retention, ScheduleCheck) and waiting.retention.reason == decide.RETENTION
