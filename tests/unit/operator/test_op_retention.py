"""Deleting finished sessions after deleteFinishedAfter, counted from when they finished."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from agentsession_operator.decisions.retention import (
    deletion_time,
    finished_at,
    is_due,
)

T0 = datetime(2025, 1, 2, 12, 0, tzinfo=UTC)
DAY = timedelta(hours=24)
Make = Callable[..., dict[str, Any]]


def finished(make_session: Make, phase: str, reason: str, when: str, name: str = "demo", **kw: Any) -> dict[str, Any]:
    type_ = "Expired" if phase == "Expired" else "Failed"
    conditions = [
        {
            "type": "Ready",
            "status": "False",
            "reason": reason,
            "message": "",
            "lastTransitionTime": "2025-01-01T00:00:00Z",
        },
        {"type": type_, "status": "True", "reason": reason, "message": "", "lastTransitionTime": when},
    ]
    return make_session(name=name, status={"phase": phase, "conditions": conditions}, **kw)


def test_finished_at(make_session: Make) -> None:
    assert finished_at(finished(make_session, "Expired", "TTLExpired", "2025-01-01T10:00:00Z")) == datetime(
        2025, 1, 1, 10, 0, tzinfo=UTC
    )
    assert finished_at(finished(make_session, "Failed", "PodFailed", "2025-01-01T10:00:00Z")) is not None
    # policy violations and name conflicts are fixable, so not finished
    assert finished_at(finished(make_session, "Failed", "PolicyViolation", "2025-01-01T10:00:00Z")) is None
    assert finished_at(make_session(status={"phase": "Ready"})) is None
    assert finished_at(make_session()) is None
    assert finished_at(make_session(status={"phase": "Expired", "conditions": []})) is None


def test_due_counts_from_finish_not_creation(make_session: Make) -> None:
    session = finished(make_session, "Expired", "IdleTimeout", "2025-01-01T13:00:00Z", created="2024-06-01T00:00:00Z")
    assert deletion_time(session, DAY) == datetime(2025, 1, 2, 13, 0, tzinfo=UTC)
    assert not is_due(session, DAY, T0)
    assert is_due(session, DAY, T0 + timedelta(hours=1))
    assert not is_due(session, None, T0 + timedelta(days=365))


def test_never_due_while_deleting(make_session: Make) -> None:
    session = finished(make_session, "Expired", "TTLExpired", "2025-01-01T00:00:00Z", deleting=True)
    assert not is_due(session, DAY, T0)
