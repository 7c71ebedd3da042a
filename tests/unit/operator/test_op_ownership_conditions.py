"""Owner references and condition bookkeeping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentsession_operator.decisions.conditions import find_condition, is_true, set_condition
from agentsession_operator.decisions.ownership import is_owned_by, owner_uids, session_owner_reference

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def test_is_owned_by_needs_the_uid() -> None:
    obj = {"metadata": {"ownerReferences": [{"uid": "a", "controller": True}, {"uid": "b"}]}}
    assert is_owned_by(obj, "a") and is_owned_by(obj, "b")
    assert not is_owned_by(obj, "c")
    assert not is_owned_by(obj, None)
    assert not is_owned_by(obj, "")
    assert not is_owned_by({"metadata": {"name": "demo"}}, "a")  # same name, no reference: not ours
    assert not is_owned_by(None, "a")
    assert owner_uids(obj) == {"a", "b"}


def test_session_owner_reference() -> None:
    ref = session_owner_reference({"metadata": {"name": "demo", "uid": "u"}})
    assert ref == {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSession",
        "name": "demo",
        "uid": "u",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_set_condition_adds() -> None:
    result = set_condition(None, "Ready", False, "Pending", "waiting", T0, 3)
    assert result == [
        {
            "type": "Ready",
            "status": "False",
            "reason": "Pending",
            "message": "waiting",
            "lastTransitionTime": "2025-01-01T12:00:00Z",
            "observedGeneration": 3,
        }
    ]


def test_transition_time_moves_only_on_status_change() -> None:
    first = set_condition([], "Ready", False, "Pending", "a", T0, 1)
    later = T0 + timedelta(minutes=5)
    same = set_condition(first, "Ready", False, "Provisioning", "b", later, 2)
    assert same[0]["lastTransitionTime"] == "2025-01-01T12:00:00Z"
    assert same[0]["reason"] == "Provisioning" and same[0]["message"] == "b"
    assert same[0]["observedGeneration"] == 2
    flipped = set_condition(same, "Ready", True, "SandboxReady", "", later, 2)
    assert flipped[0]["lastTransitionTime"] == "2025-01-01T12:05:00Z"
    assert flipped[0]["status"] == "True"


def test_set_condition_keeps_order_and_input() -> None:
    start = set_condition(None, "A", True, "R", "", T0, None)
    start = set_condition(start, "B", True, "R", "", T0, None)
    before = [dict(c) for c in start]
    updated = set_condition(start, "A", "Unknown", "R2", "", T0 + timedelta(seconds=1), None)
    assert [c["type"] for c in updated] == ["A", "B"]
    assert start == before  # input untouched
    assert "observedGeneration" not in updated[0]
    assert (find_condition(updated, "A") or {}).get("status") == "Unknown"
    assert find_condition(updated, "C") is None
    assert is_true(updated, "B") and not is_true(updated, "A") and not is_true(None, "A")


def test_long_messages_are_capped_to_the_schema_limit() -> None:
    (condition,) = set_condition(None, "Failed", True, "R" * 2000, "m" * 40_000, T0, None)
    assert len(condition["message"]) == 32_768 and condition["message"].endswith("…")
    assert len(condition["reason"]) == 1024
