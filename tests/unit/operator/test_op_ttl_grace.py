"""Issue 11 item 12: a lowered maxTtl applies to running sessions after a grace period, with a Warning
Event at once; a session about to expire gets a Warning Event ahead of time.

Attack (before): lowering a policy's maxTtl from 8h to 1h expired and deleted, at the next pass, every
session older than 1h, volumes included, without a word.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from agentsession_api.timestamps import format_time, parse_time
from agentsession_operator.decisions import actions as decide
from agentsession_operator.decisions import policy_merge, policy_resolve

Make = Callable[..., dict[str, Any]]
CREATED = datetime(2025, 1, 1, 9, 0, tzinfo=UTC)
NOW = CREATED + timedelta(hours=3)  # the session has run 3 h when the policy changes
H = timedelta(hours=1)


def _pol(make_policy: Make, max_ttl: str, grace: str | None = None) -> policy_merge.EffectivePolicy:
    limits = {"maxTtl": max_ttl, **({"maxTtlGracePeriod": grace} if grace else {})}
    return policy_merge.merge_policies([make_policy("caps", spec={"limits": limits})])


def _running(make_session: Make, make_claim: Make, make_sandbox: Make) -> tuple[dict[str, Any], Any, Any]:
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "ttl": "8h"}, created=format_time(CREATED))
    claim = make_claim(sandbox_name="demo", ready=("True", "DependenciesReady", ""), pod_ips=["127.1.0.5"])
    return session, claim, make_sandbox(pod_ips=["127.1.0.5"])


def _pass(session: dict[str, Any], claim: Any, sandbox: Any, now: datetime, eff: Any, **kw: Any) -> tuple[Any, Any]:
    acts = decide.reconcile_actions(session, claim, sandbox, now, effective=eff, **kw)
    patches = [a.patch for a in acts if isinstance(a, decide.PatchStatus)]
    if patches:
        merged = {**(session.get("status") or {}), **patches[0]}
        session = {**session, "status": {k: v for k, v in merged.items() if v is not None}}
    return session, acts


def _warnings(acts: list[Any]) -> list[decide.Warn]:
    return [a for a in acts if isinstance(a, decide.Warn)]


def test_max_ttl_in_force_rules() -> None:
    r8, r1 = policy_merge.Sourced(8 * H, "a"), policy_merge.Sourced(1 * H, "a")
    # Loosened or unchanged: the recorded maximum holds.
    assert policy_resolve.max_ttl_in_force(r1, r8, None, CREATED, NOW, H).cap == H
    # Lowered: pending for the grace period; the session may run until then, never past its former maximum.
    cap = policy_resolve.max_ttl_in_force(r8, r1, None, CREATED, NOW, H)
    assert (cap.pending, cap.pending_at, cap.cap) == (H, NOW + H, 4 * H)
    assert cap.max_ttl == r8
    # A young session is not cut short by the grace period: the new maximum applies as it is.
    young = policy_resolve.max_ttl_in_force(r8, policy_merge.Sourced(6 * H, "a"), None, CREATED, NOW, H)
    assert young.cap == 6 * H
    # The grace period started at the first pass and does not move on later passes; then the new maximum holds.
    later = policy_resolve.max_ttl_in_force(r8, r1, (H, NOW + H), CREATED, NOW + H / 2, H)
    assert later.pending_at == NOW + H and later.cap == 4 * H
    done = policy_resolve.max_ttl_in_force(r8, r1, (H, NOW + H), CREATED, NOW + H, H)
    assert done.cap == H and done.pending is None and done.max_ttl == r1
    # Reverted during the grace period: nothing pending, the former maximum again.
    reverted = policy_resolve.max_ttl_in_force(r8, r8, (H, NOW + H), CREATED, NOW + H / 2, H)
    assert reverted.cap == 8 * H and reverted.pending is None


def test_lowering_max_ttl_keeps_a_running_session_for_the_grace_period(
    make_session: Make, make_claim: Make, make_sandbox: Make, make_policy: Make
) -> None:
    session, claim, sandbox = _running(make_session, make_claim, make_sandbox)
    session, _ = _pass(session, claim, sandbox, NOW - timedelta(minutes=5), _pol(make_policy, "8h"))
    assert session["status"]["phase"] == "Ready" and session["status"]["resolved"]["maxTtl"] == "8h"
    assert parse_time(session["status"]["expiresAt"]) == CREATED + 8 * H

    lowered = _pol(make_policy, "1h", grace="30m")
    session, acts = _pass(session, claim, sandbox, NOW, lowered)
    # Not expired, not deleted: it now expires when the grace period ends, and a Warning Event says so at once.
    assert session["status"]["phase"] == "Ready"
    assert not any(isinstance(a, decide.DeleteClaim) for a in acts)
    assert parse_time(session["status"]["expiresAt"]) == NOW + timedelta(minutes=30)
    (warning,) = _warnings(acts)
    assert warning.reason == "MaxTtlLowered"
    assert "1h" in warning.message and "AgentSessionPolicy caps" in warning.message and "30m" in warning.message
    assert session["status"]["resolved"]["pendingMaxTtl"] == "1h"
    # The claim's shutdownTime follows (agent-sandbox's own backstop must not end it earlier or later).
    patch = next(a for a in acts if isinstance(a, decide.PatchClaim)).patch
    assert parse_time(patch["spec"]["lifecycle"]["shutdownTime"]) == NOW + timedelta(minutes=30)

    # Later passes: no second warning about the same change, the same expiry.
    session, acts = _pass(session, claim, sandbox, NOW + timedelta(minutes=10), lowered, expiry_lead=None)
    assert _warnings(acts) == [] and parse_time(session["status"]["expiresAt"]) == NOW + timedelta(minutes=30)
    # At the end of the grace period the new limit holds: the session expires.
    session, acts = _pass(session, claim, sandbox, NOW + timedelta(minutes=30), lowered, expiry_lead=None)
    assert session["status"]["phase"] == "Expired"
    assert session["status"]["resolved"]["maxTtl"] == "1h" and session["status"]["resolved"]["pendingMaxTtl"] is None


def test_default_grace_period_is_one_hour(
    make_session: Make, make_claim: Make, make_sandbox: Make, make_policy: Make
) -> None:
    session, claim, sandbox = _running(make_session, make_claim, make_sandbox)
    session, _ = _pass(session, claim, sandbox, NOW - timedelta(minutes=5), _pol(make_policy, "8h"))
    session, acts = _pass(session, claim, sandbox, NOW, _pol(make_policy, "1h"))
    assert parse_time(session["status"]["expiresAt"]) == NOW + H
    assert "1h (the default)" in _warnings(acts)[0].message


def test_a_new_session_gets_the_lowered_limit_at_once(make_session: Make, make_policy: Make) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "p"}}, created=format_time(NOW))
    acts = decide.reconcile_actions(session, None, None, NOW, effective=_pol(make_policy, "1h"))
    status = next(a.patch for a in acts if isinstance(a, decide.PatchStatus))
    assert parse_time(status["expiresAt"]) == NOW + H


def test_expiring_soon_warning_once_per_expiry(
    make_session: Make, make_claim: Make, make_sandbox: Make, make_policy: Make
) -> None:
    session, claim, sandbox = _running(make_session, make_claim, make_sandbox)
    expires = CREATED + 8 * H
    session, acts = _pass(session, claim, sandbox, NOW, policy_merge.EMPTY_POLICY)
    assert _warnings(acts) == []
    assert next(a for a in acts if isinstance(a, decide.ScheduleCheck)).at == expires - timedelta(minutes=10)
    session, acts = _pass(session, claim, sandbox, expires - timedelta(minutes=10), policy_merge.EMPTY_POLICY)
    (warning,) = _warnings(acts)
    assert warning.reason == "ExpiringSoon" and format_time(expires) in warning.message
    assert session["status"]["expiryWarnedFor"] == format_time(expires)
    session, acts = _pass(session, claim, sandbox, expires - timedelta(minutes=5), policy_merge.EMPTY_POLICY)
    assert _warnings(acts) == []  # once
    # Configurable: a 1 h lead warns earlier; None never warns.
    fresh, claim, sandbox = _running(make_session, make_claim, make_sandbox)
    _, acts = _pass(fresh, claim, sandbox, expires - timedelta(minutes=50), policy_merge.EMPTY_POLICY, expiry_lead=H)
    assert [w.reason for w in _warnings(acts)] == ["ExpiringSoon"]
    _, acts = _pass(fresh, claim, sandbox, expires - timedelta(minutes=5), policy_merge.EMPTY_POLICY, expiry_lead=None)
    assert _warnings(acts) == []
