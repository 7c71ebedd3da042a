"""Time-based rules of a session: TTL expiry, idle deadlines and when a claim may be created.

Idle clock: the client reports activity in an annotation (format and parser: agentsession_api.activity).
The operator records *its own* clock when it sees the annotation change (:func:`activity_patch`), not the
client's timestamp. Becoming Ready (first start, resume) also counts as activity, so a resumed session
gets a full idle period.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from agentsession_api import phases
from agentsession_api.activity import parse_activity
from agentsession_api.timestamps import format_time, utc
from agentsession_api.views import Session, SessionStatus, Status, spec_of, status_of
from agentsession_operator import constants
from agentsession_operator.decisions.resolved import Resolved


# --- TTL ---------------------------------------------------------------------------------------------
# Every rule takes the settings in force (policy_resolve.resolve under the session's policies) as an argument:
# a rule that resolved on its own would judge the session without its policies.
def created_at(session: Mapping[str, Any]) -> datetime | None:
    """metadata.creationTimestamp, parsed."""
    return Session(session).creation_time


def expires_at(session: Mapping[str, Any], resolved: Resolved) -> datetime | None:
    """creationTimestamp + the TTL in force; None without a TTL (or before the API server set the timestamp)."""
    ttl = resolved.ttl
    created = created_at(session)
    return created + ttl if ttl is not None and created is not None else None


def is_expired(session: Mapping[str, Any], now: datetime, resolved: Resolved) -> bool:
    """True once ``now`` reached the expiry time."""
    deadline = expires_at(session, resolved)
    return deadline is not None and utc(now) >= deadline


def is_deleting(obj: Mapping[str, Any] | None) -> bool:
    """True when the object has a deletionTimestamp."""
    return bool(((obj or {}).get("metadata") or {}).get("deletionTimestamp"))


def why_creation_waits(resolved: Resolved, *, warm_pool_exists: bool, violations: list[str] | None) -> str | None:
    """Why a live session cannot have its claim yet (a reason), or None when it can.

    The one place for this rule: :func:`should_create_claim` acts on it and status.py reports it.
    """
    if violations:
        return phases.REASON_POLICY_VIOLATION
    if not resolved.warm_pool:
        return phases.REASON_NO_WARM_POOL
    if not warm_pool_exists:
        return phases.REASON_WARM_POOL_NOT_FOUND
    return None


def should_create_claim(
    session: Mapping[str, Any],
    claim_exists: bool,
    now: datetime,
    *,
    resolved: Resolved,
    warm_pool_exists: bool = True,
    violations: list[str] | None = None,
) -> tuple[bool, str]:
    """Whether to create the SandboxClaim now, and a CamelCase reason either way.

    Never for a session being deleted, in a terminal phase, or past its expiry: a late reconcile must not
    resurrect a sandbox the TTL already ended.
    """
    phase = status_of(session).get("phase")
    checks: tuple[tuple[bool, str], ...] = (
        (claim_exists, "ClaimExists"),
        (is_deleting(session), phases.REASON_DELETING),
        (phases.is_terminal(phase), f"Phase{phase}"),
        (is_expired(session, now, resolved), phases.REASON_TTL_EXPIRED),
    )
    for blocked, reason in checks:
        if blocked:
            return False, reason
    waiting = why_creation_waits(resolved, warm_pool_exists=warm_pool_exists, violations=violations)
    return (False, waiting) if waiting else (True, "CreateClaim")


# --- Activity and idleness ---------------------------------------------------------------------------
def activity_patch(annotation_value: object, now: datetime, busy_cap: timedelta | None = None) -> SessionStatus | None:
    """Status fields to write when the activity annotation changed; None when the value is garbage.

    Times come from the operator's clock (``now``), see the module docstring. ``busy=`` counts for at
    most ``busy_cap``: the policy's maximum idle timeout in force (without one, the tenant chooses its
    own idle timeout anyway, and busy protects a long command).
    """
    activity = parse_activity(annotation_value)
    if activity is None:
        return None
    now = utc(now)
    busy = timedelta(seconds=activity.busy_seconds)
    if busy_cap is not None:
        busy = min(busy, busy_cap)
    busy_until = now + busy if busy > timedelta(0) else None
    return {
        "lastActivityTime": format_time(now),
        "busyUntil": format_time(busy_until) if busy_until else None,
    }


def idle_deadline(
    last_activity: datetime | None,
    busy_until: datetime | None,
    idle_timeout: timedelta | None,
    busy_cap: timedelta | None = None,
) -> datetime | None:
    """When the idle timeout applies: the later of last activity and busy-until, plus the timeout.

    Busy-until counts for at most ``busy_cap`` (the policy's maximum idle timeout in force now) after
    the last activity: a ``busy=`` recorded earlier, or forged, cannot outlast what the policy allows.
    """
    if idle_timeout is None or last_activity is None:
        return None
    start = last_activity
    if busy_until is not None:
        capped = busy_until if busy_cap is None else min(busy_until, last_activity + busy_cap)
        start = max(last_activity, capped)
    return start + idle_timeout


def status_idle_deadline(
    status: Mapping[str, Any] | None, idle_timeout: timedelta | None, busy_cap: timedelta | None = None
) -> datetime | None:
    """:func:`idle_deadline` from the session's status fields."""
    view = Status(status)
    return idle_deadline(view.last_activity, view.busy_until_time, idle_timeout, busy_cap)


def desired_operating_mode(
    session: Mapping[str, Any],
    status: Mapping[str, Any] | None,
    resolved: Resolved,
    now: datetime,
    current_mode: str = constants.OPERATING_MODE_RUNNING,
) -> str:
    """``Suspended`` when the user asked for it or the idle timeout passed with idleAction Suspend (or
    Hibernate, which suspends the same way until the operator can checkpoint).

    ``current_mode`` is the Sandbox's operatingMode now. Idleness suspends a Ready session, and keeps a
    suspended one suspended; it never undoes a resume under way (the Sandbox Running again, its new Pod
    not Ready yet: seen on the real node, where that takes longer than a short idle timeout). Becoming
    Ready restarts the idle clock.
    """
    if spec_of(session).get("suspend"):
        return constants.OPERATING_MODE_SUSPENDED
    if resolved.idle_action not in phases.SUSPENDING_IDLE_ACTIONS:
        return constants.OPERATING_MODE_RUNNING
    # A session still provisioning has had no chance to be used: suspending it mid-start only delays it.
    phase = (status or {}).get("phase")
    resuming = phase == phases.Phase.SUSPENDED and current_mode == constants.OPERATING_MODE_RUNNING
    if phase in (phases.Phase.READY, phases.Phase.SUSPENDED) and not resuming:
        deadline = status_idle_deadline(status, resolved.idle_timeout, resolved.max_idle_timeout)
        if deadline is not None and utc(now) >= deadline:
            return constants.OPERATING_MODE_SUSPENDED
    return constants.OPERATING_MODE_RUNNING
