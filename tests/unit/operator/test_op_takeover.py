"""kube/takeover.py: the end of a take-over's first pass over every session, said once (issue 53 item 2)."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

from prometheus_client import REGISTRY

from agentsession_api.timestamps import format_micro_time
from agentsession_operator.kube.reconciler import Reconciler
from agentsession_operator.kube.takeover import TakeOver, in_deadline_order, status_deadline


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


class NoKube:
    """No API call is expected of these tests (the take-over's background orphan checks fail in the background)."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"called Kube.{name}")


def _session(name: str, **status: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name}, "status": status}


def test_the_soonest_status_deadline_first_and_the_rest_in_the_order_given() -> None:
    """Issue 53 item 4: a take-over passes the sessions soonest due first."""
    bodies: dict[tuple[str, str], dict[str, Any]] = {
        ("ns", "new"): {"metadata": {"namespace": "ns", "name": "new"}},  # never passed: no status
        ("ns", "ttl"): _session("ttl", expiresAt="2026-12-07T10:00:05Z", idleDeadline="2026-12-07T11:00:00Z"),
        ("ns", "idle"): _session("idle", idleDeadline="2026-12-07T10:00:01.500000Z"),
        ("ns", "ended"): _session("ended", phase="Expired", expiresAt="2026-12-07T09:00:00Z"),
        ("ns", "grace"): _session("grace", pendingMaxTtlAt="2026-12-07T10:00:03Z"),
        ("ns", "garbage"): _session("garbage", expiresAt="tomorrow", idleDeadline=""),
    }
    order = in_deadline_order(list(bodies), bodies.get)
    assert order == [("ns", n) for n in ("idle", "grace", "ttl", "new", "ended", "garbage")]
    assert status_deadline(bodies[("ns", "ttl")]) == dt.datetime(2026, 12, 7, 10, 0, 5, tzinfo=dt.UTC)
    assert status_deadline(None) is None and status_deadline(bodies[("ns", "ended")]) is None


async def test_a_take_over_schedules_its_passes_soonest_due_first() -> None:
    """The scheduler orders passes due at one moment by key: the take-over's are a microsecond apart, in
    deadline order, so "z-due" (due first) goes before "a-later", whatever the cache's or the keys' order."""
    reconciler = Reconciler(NoKube())  # type: ignore[arg-type]
    now = dt.datetime.now(dt.UTC)
    stamps = {"a-later": now + dt.timedelta(hours=1), "z-due": now - dt.timedelta(seconds=2), "m-soon": now}
    for name, at in stamps.items():
        reconciler.cache.sessions[("ns", name)] = _session(name, expiresAt=format_micro_time(at))
    reconciler.cache.sessions[("ns", "b-none")] = _session("b-none")
    await reconciler.take_over()
    due = {key[1]: reconciler.scheduler.due(key) for key in reconciler.cache.sessions}
    assert sorted(due, key=lambda name: due[name]) == ["z-due", "m-soon", "a-later", "b-none"]  # type: ignore[arg-type, return-value]
    await asyncio.gather(*reconciler._background, return_exceptions=True)
