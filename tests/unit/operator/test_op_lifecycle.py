"""TTL, activity and idle rules."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentsession_operator.decisions.lifecycle import (
    activity_patch,
    desired_operating_mode,
    expires_at,
    idle_deadline,
    is_expired,
    should_create_claim,
)
from agentsession_operator.decisions.policy_resolve import resolve
from agentsession_operator.decisions.resolved import Resolved

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
Make = Callable[..., dict[str, Any]]


def test_expires_at(make_session: Make) -> None:
    session = make_session(spec={"ttl": "2h"})
    assert expires_at(session, resolve(session)) == datetime(2025, 1, 1, 13, 0, tzinfo=UTC)
    assert expires_at(make_session(spec={}), Resolved()) is None
    assert expires_at(session, Resolved(ttl=timedelta(minutes=30))) == datetime(2025, 1, 1, 11, 30, tzinfo=UTC)
    no_timestamp = make_session(spec={"ttl": "2h"})
    del no_timestamp["metadata"]["creationTimestamp"]
    assert expires_at(no_timestamp, resolve(no_timestamp)) is None


def test_is_expired_boundaries(make_session: Make) -> None:
    session = make_session(spec={"ttl": "1h"})  # created 11:00
    hour = Resolved(ttl=timedelta(hours=1))
    assert not is_expired(session, datetime(2025, 1, 1, 11, 59, 59, tzinfo=UTC), hour)
    assert is_expired(session, datetime(2025, 1, 1, 12, 0, tzinfo=UTC), hour)
    assert is_expired(session, datetime(2025, 1, 1, 12, 0), hour)  # naive = UTC
    assert not is_expired(make_session(spec={}), T0 + timedelta(days=999), Resolved())


@pytest.mark.parametrize(
    ("kwargs", "status", "expected"),
    [
        ({}, None, (True, "CreateClaim")),
        ({"claim_exists": True}, None, (False, "ClaimExists")),
        ({"deleting": True}, None, (False, "Deleting")),
        ({}, {"phase": "Expired"}, (False, "PhaseExpired")),
        ({}, {"phase": "Failed"}, (False, "PhaseFailed")),
        ({"ttl": "30m"}, None, (False, "TTLExpired")),
        ({"violations": ["x"]}, None, (False, "PolicyViolation")),
        ({"no_pool": True}, None, (False, "NoWarmPool")),
        ({"warm_pool_exists": False}, None, (False, "WarmPoolNotFound")),
        ({}, {"phase": "Pending"}, (True, "CreateClaim")),
    ],
)
def test_should_create_claim(
    make_session: Make, kwargs: dict[str, Any], status: dict[str, Any] | None, expected: tuple[bool, str]
) -> None:
    spec: dict[str, Any] = {} if kwargs.get("no_pool") else {"warmPoolRef": {"name": "p"}}
    if "ttl" in kwargs:
        spec["ttl"] = kwargs["ttl"]
    session = make_session(spec=spec, status=status, deleting=kwargs.get("deleting", False))
    result = should_create_claim(
        session,
        kwargs.get("claim_exists", False),
        T0,
        resolved=resolve(session),
        warm_pool_exists=kwargs.get("warm_pool_exists", True),
        violations=kwargs.get("violations"),
    )
    assert result == expected


def test_activity_patch_uses_operator_clock() -> None:
    patch = activity_patch("2020-01-01T00:00:00Z busy=60", T0)  # a client with a clock years behind
    assert patch == {"lastActivityTime": "2025-01-01T12:00:00Z", "busyUntil": "2025-01-01T12:01:00Z"}
    assert activity_patch("2025-01-01T12:00:00Z busy=0", T0) == {
        "lastActivityTime": "2025-01-01T12:00:00Z",
        "busyUntil": None,
    }
    assert activity_patch("garbage", T0) is None


def test_idle_deadline() -> None:
    idle = timedelta(minutes=15)
    assert idle_deadline(T0, None, idle) == T0 + idle
    assert idle_deadline(T0, T0 + timedelta(hours=1), idle) == T0 + timedelta(hours=1) + idle
    assert idle_deadline(T0, T0 - timedelta(hours=1), idle) == T0 + idle
    assert idle_deadline(None, T0, idle) is None
    assert idle_deadline(T0, None, None) is None


def test_desired_operating_mode(make_session: Make) -> None:
    status = {"phase": "Ready", "lastActivityTime": "2025-01-01T11:00:00Z"}
    suspend = Resolved(warm_pool="p", idle_timeout=timedelta(minutes=15), idle_action="Suspend")
    delete = Resolved(warm_pool="p", idle_timeout=timedelta(minutes=15), idle_action="Delete")
    assert desired_operating_mode(make_session(spec={"suspend": True}), None, delete, T0) == "Suspended"
    assert desired_operating_mode(make_session(), status, suspend, T0) == "Suspended"
    assert desired_operating_mode(make_session(), status, delete, T0) == "Running"
    # Still provisioning: never suspended for idleness (it has had no chance to be used).
    assert desired_operating_mode(make_session(), {**status, "phase": "Provisioning"}, suspend, T0) == "Running"
    fresh = {"phase": "Ready", "lastActivityTime": "2025-01-01T11:50:00Z"}
    assert desired_operating_mode(make_session(), fresh, suspend, T0) == "Running"
    busy = {"phase": "Ready", "lastActivityTime": "2025-01-01T11:00:00Z", "busyUntil": "2025-01-01T11:55:00Z"}
    assert desired_operating_mode(make_session(), busy, suspend, T0) == "Running"
    assert desired_operating_mode(make_session(), {}, suspend, T0) == "Running"


def test_hibernate_suspends_at_the_idle_timeout_as_suspend(make_session: Make) -> None:
    status = {"phase": "Ready", "lastActivityTime": "2025-01-01T11:00:00Z"}
    hibernate = Resolved(warm_pool="p", idle_timeout=timedelta(minutes=15), idle_action="Hibernate")
    assert desired_operating_mode(make_session(), status, hibernate, T0) == "Suspended"
    fresh = {"phase": "Ready", "lastActivityTime": "2025-01-01T11:50:00Z"}
    assert desired_operating_mode(make_session(), fresh, hibernate, T0) == "Running"


def test_a_resume_under_way_is_never_undone_for_idleness(make_session: Make) -> None:
    # Seen on the real node: the woken session's new Pod took longer than the idle timeout to become
    # Ready; the phase was still Suspended, so the operator suspended it again under the client.
    suspend = Resolved(warm_pool="p", idle_timeout=timedelta(minutes=15), idle_action="Suspend")
    stale = {"phase": "Suspended", "lastActivityTime": "2025-01-01T11:00:00Z"}
    assert desired_operating_mode(make_session(), stale, suspend, T0, current_mode="Suspended") == "Suspended"
    assert desired_operating_mode(make_session(), stale, suspend, T0, current_mode="Running") == "Running"
    woken = {"phase": "Suspended", "lastActivityTime": "2025-01-01T11:59:00Z"}
    assert desired_operating_mode(make_session(), woken, suspend, T0, current_mode="Suspended") == "Running"
    # spec.suspend always wins.
    asked = make_session(spec={"suspend": True})
    assert desired_operating_mode(asked, stale, suspend, T0, current_mode="Running") == "Suspended"
