"""kube/takeover.py: the end of a take-over's first pass over every session, said once (issue 53 item 2)."""

from __future__ import annotations

from prometheus_client import REGISTRY

from agentsession_operator.kube.takeover import TakeOver


def _done() -> float:
    return REGISTRY.get_sample_value("agentsession_first_pass_done_timestamp_seconds") or 0.0


def test_done_once_every_session_of_the_take_over_passed_or_went() -> None:
    t = TakeOver()
    t.listed({"sessions": 0.5})
    t.begin([("ns", "a"), ("ns", "b"), ("ns", "c")])
    t.passed(("ns", "a"))
    t.passed(("ns", "x"))  # not the take-over's: changes nothing
    assert t.done_at is None
    t.passed(("ns", "b"))
    t.passed(("ns", "c"))  # passed, or forgotten (deleted meanwhile): the reconciler says both alike
    assert t.done_at is not None and _done() == t.done_at
    t.passed(("ns", "c"))
    assert _done() == t.done_at  # said once


def test_a_take_over_with_no_session_is_done_at_once() -> None:
    t = TakeOver()
    t.begin([])
    assert t.done_at is not None


def test_a_second_take_over_starts_again() -> None:
    t = TakeOver()
    t.begin([("ns", "a")])
    t.passed(("ns", "a"))
    first = t.done_at
    t.begin([("ns", "b")])
    assert t.done_at is None and first is not None
    t.passed(("ns", "b"))
    assert t.done_at is not None and t.done_at >= first
