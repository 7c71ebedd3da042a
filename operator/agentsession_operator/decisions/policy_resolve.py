"""A session's settings in force (:func:`resolve`) under its :class:`EffectivePolicy`.

A session's own value, else the policy default; TTL and idle timeout are then capped by the maxima (an
unset TTL under a ``maxTtl`` becomes ``maxTtl``). Once the claim exists the warm pool in
``status.resolved`` stays, because a claim's pool cannot change, and the maxima recorded there only
tighten (:func:`recorded_maxima`); a lowered ``maxTtl`` applies after its grace period
(:func:`max_ttl_in_force`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from agentsession_api.durations import parse_duration
from agentsession_api.phases import IdleAction
from agentsession_api.views import Session
from agentsession_operator.decisions.policy_merge import EMPTY_POLICY, EffectivePolicy, Sourced
from agentsession_operator.decisions.resolved import Resolved


def _spec_duration(text: str | None) -> timedelta | None:
    try:
        return parse_duration(text) if text is not None else None
    except ValueError:
        return None  # admission refuses these; policy_violations reports it should one slip through


def _capped(value: timedelta | None, cap: Sourced[timedelta] | None) -> timedelta | None:
    if cap is None:
        return value
    return cap.value if value is None else min(value, cap.value)


def _stricter(a: Sourced[timedelta] | None, b: Sourced[timedelta] | None) -> Sourced[timedelta] | None:
    if a is None or b is None:
        return a or b
    return a if a.value <= b.value else b


def _left(value: Sourced[timedelta] | None) -> Sourced[timedelta] | None:
    """A fork's lineage TTL as a cap: never below zero (a fork with nothing left expires at once)."""
    if value is None or value.value > timedelta(0):
        return value
    return Sourced(timedelta(0), value.policy, value.text)


def _recorded(text: Any) -> Sourced[timedelta] | None:
    try:
        return Sourced(parse_duration(text), "status.resolved") if text else None
    except ValueError:
        return None


DEFAULT_MAX_TTL_GRACE = timedelta(hours=1)
"""How long a running session keeps its former expiry after maxTtl is lowered, unless a policy says."""


@dataclass(frozen=True)
class TtlCap:
    """The maxTtl in force for a running session, and a lowered one waiting for its grace period."""

    max_ttl: Sourced[timedelta] | None
    """What status.resolved.maxTtl records (the former maximum while a lowered one is pending)."""
    cap: timedelta | None
    """What the TTL is capped by now: during the grace period, the lowered maximum but never ending
    the session before the grace period does."""
    pending: timedelta | None = None
    pending_at: datetime | None = None


def max_ttl_in_force(
    recorded: Sourced[timedelta] | None,
    current: Sourced[timedelta] | None,
    pending: tuple[timedelta, datetime] | None,
    created: datetime | None,
    now: datetime | None,
    grace: timedelta,
) -> TtlCap:
    """maxTtl for a session that runs: a loosened one never applies (the recorded one holds), a lowered
    one applies after ``grace`` counted from the pass that first saw it (``pending`` keeps that moment).

    Until then the session may still run until ``pending_at`` even if it is older than the new maximum,
    and no longer than its former maximum: cap = min(recorded, max(current, pending_at - created)).
    ``now`` None (a caller that only reads values) never starts nor ends a grace period.
    """
    if recorded is None or current is None or current.value >= recorded.value:
        stricter = _stricter(current, recorded)
        return TtlCap(stricter, stricter.value if stricter else None)
    at = pending[1] if pending is not None else (now + grace if now is not None else None)
    if at is None or created is None:  # nothing to time it by: keep the former maximum
        return TtlCap(recorded, recorded.value)
    if now is not None and now >= at:
        return TtlCap(current, current.value)
    return TtlCap(recorded, min(recorded.value, max(current.value, at - created)), current.value, at)


def resolve(
    session: Mapping[str, Any], effective: EffectivePolicy = EMPTY_POLICY, now: datetime | None = None
) -> Resolved:
    """Settings in force: the session's values, else policy defaults, capped by policy maxima.

    ``now`` lets a lowered maxTtl's grace period start or end (:func:`max_ttl_in_force`)."""
    view = Session(session)
    spec, before = view.spec_view, view.resolved_view
    pool = spec.warm_pool_ref.name
    if not pool and view.claim_created:
        pool = before.warm_pool_ref.name
    if not pool and effective.default_warm_pool:
        pool = effective.default_warm_pool.value
    ttl = _spec_duration(spec.ttl)
    if ttl is None and effective.default_ttl:
        ttl = effective.default_ttl.value
    idle = _spec_duration(spec.idle_timeout)
    if idle is None and effective.default_idle_timeout:
        idle = effective.default_idle_timeout.value
    action = spec.idle_action or (
        effective.default_idle_action.value if effective.default_idle_action else IdleAction.DELETE
    )
    max_ttl, max_idle = _stricter(effective.max_ttl, _left(effective.lineage_max_ttl)), effective.max_idle_timeout
    ttl_cap = TtlCap(max_ttl, max_ttl.value if max_ttl else None)
    if view.claim_created:
        # Once running, a session only becomes more constrained: the maxima that applied before
        # (status.resolved) still cap it, so unselecting a policy (removing a label) lifts nothing;
        # a lowered maxTtl applies after its grace period.
        pending_value, pending_at = _recorded(before.pending_max_ttl), before.pending_max_ttl_at
        ttl_cap = max_ttl_in_force(
            _recorded(before.max_ttl),
            max_ttl,
            (pending_value.value, pending_at) if pending_value and pending_at else None,
            view.creation_time,
            now,
            effective.max_ttl_grace.value if effective.max_ttl_grace else DEFAULT_MAX_TTL_GRACE,
        )
        max_idle = _stricter(max_idle, _recorded(before.max_idle_timeout))
    return Resolved(
        warm_pool=pool or None,
        ttl=ttl if ttl_cap.cap is None else (ttl_cap.cap if ttl is None else min(ttl, ttl_cap.cap)),
        idle_timeout=_capped(idle, max_idle),
        max_ttl=ttl_cap.max_ttl.value if ttl_cap.max_ttl else None,
        max_idle_timeout=max_idle.value if max_idle else None,
        pending_max_ttl=ttl_cap.pending,
        pending_max_ttl_at=ttl_cap.pending_at,
        idle_action=action,
        labels={**{k: s.value for k, s in effective.default_labels.items()}, **(spec.labels or {})},
        pod_labels={**{k: s.value for k, s in effective.default_pod_labels.items()}, **(spec.pod_labels or {})},
        hibernate_forbidden_by=effective.hibernate_denied.origin()[1:-1] if effective.hibernate_denied else None,
        max_checkpoint_bytes=effective.max_checkpoint.value if effective.max_checkpoint else None,
        max_hibernated=(effective.max_hibernated.value, effective.max_hibernated.policy)
        if effective.max_hibernated
        else None,
    )


def recorded_maxima(session: Mapping[str, Any]) -> dict[str, Sourced[timedelta]]:
    """``maxTtl``/``maxIdleTimeout`` recorded in ``status.resolved`` once the claim exists: a running
    session's maxima only tighten (:func:`resolve`), so these still bound what ``spec`` may ask for."""
    view = Session(session)
    if not view.claim_created:
        return {}
    before = view.resolved_view
    found = {}
    for key, field_name, text in (
        ("ttl", "maxTtl", before.max_ttl),
        ("idleTimeout", "maxIdleTimeout", before.max_idle_timeout),
    ):
        value = _recorded(text)
        if value is not None:
            found[key] = Sourced(value.value, f"status.resolved.{field_name}", str(text))
    return found
