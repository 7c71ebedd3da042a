"""Issue 28 item 11: one tenant's churn is not everyone's latency (kube/fairness.py, its use in the reconciler,
and a waiting fork's backoff). The speed claim itself is benchmarks/bench_fairness.py; these hold the rules."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import pytest
from fake_kube import FakeKube, store

from agentsession_api import names
from agentsession_api.activity import format_activity
from agentsession_operator.decisions import decide
from agentsession_operator.decisions.actions import ScheduleCheck
from agentsession_operator.kube import fairness
from agentsession_operator.kube.fairness import FairSlots, only_activity_changed
from agentsession_operator.kube.reconciler import Reconciler
from agentsession_operator.kube.session_pass import FORK_WAIT_CAP

Make = Callable[..., dict[str, Any]]


# ---- the slots: a namespace's backlog waits its turns, another namespace waits for one -----------
async def test_a_namespace_with_a_backlog_waits_its_turn_behind_one_with_a_single_pass() -> None:
    slots = FairSlots(limit=2)
    order: list[str] = []
    gate = asyncio.Event()

    async def work(namespace: str, name: str) -> None:
        async with slots.slot(namespace):
            order.append(name)
            await gate.wait()

    busy = [asyncio.create_task(work("a", f"a{i}")) for i in range(2)]  # both slots taken by tenant A
    await asyncio.sleep(0)
    backlog = [asyncio.create_task(work("a", f"a{i}")) for i in range(2, 50)]
    await asyncio.sleep(0)
    other = asyncio.create_task(work("b", "b0"))  # tenant B arrives behind 48 of A's passes
    await asyncio.sleep(0)
    assert slots.waiting() == 49
    gate.set()
    await asyncio.gather(*busy, *backlog, other)
    assert order.index("b0") <= 3, order  # one turn: after at most one of A's waiting passes
    assert [n for n in order if n.startswith("a")] == [f"a{i}" for i in range(50)]  # A's in arrival order
    assert slots.busy == 0 and slots.waiting() == 0


async def test_a_cancelled_waiter_gives_its_turn_away() -> None:
    slots = FairSlots(limit=1)
    gate = asyncio.Event()
    ran: list[str] = []

    async def work(namespace: str) -> None:
        async with slots.slot(namespace):
            ran.append(namespace)
            await gate.wait()

    first = asyncio.create_task(work("a"))
    await asyncio.sleep(0)
    cancelled, after = asyncio.create_task(work("b")), asyncio.create_task(work("c"))
    await asyncio.sleep(0)
    cancelled.cancel()
    gate.set()
    await asyncio.gather(first, after)
    assert ran == ["a", "c"] and slots.busy == 0


async def test_a_pass_stepping_aside_lends_its_slot_and_takes_a_turn_to_come_back() -> None:
    """Issue 49 item 4: a pass waiting on a node agent gives its slot away, then waits a turn for one."""
    slots = FairSlots(limit=1)
    agent, ran = asyncio.Event(), []

    async def hibernating() -> None:
        async with slots.slot("a"):
            async with slots.aside("a"):
                await agent.wait()
            ran.append("a back")

    async def other() -> None:
        async with slots.slot("b"):
            ran.append("b")

    first = asyncio.create_task(hibernating())
    await asyncio.sleep(0)
    await asyncio.wait_for(other(), 1)  # the only slot was lent
    agent.set()
    await asyncio.wait_for(first, 1)
    assert ran == ["b", "a back"] and slots.busy == 0 and slots.waiting() == 0


async def test_a_pass_cancelled_while_coming_back_leaves_the_count_true() -> None:
    slots = FairSlots(limit=1)
    agent, hold = asyncio.Event(), asyncio.Event()

    async def hibernating() -> None:
        async with slots.slot("a"), slots.aside("a"):
            await agent.wait()

    async def holder() -> None:
        async with slots.slot("b"):
            await hold.wait()

    first = asyncio.create_task(hibernating())
    await asyncio.sleep(0)
    second = asyncio.create_task(holder())
    await asyncio.sleep(0)
    agent.set()
    await asyncio.sleep(0.01)  # the first now waits for the slot the second holds
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    hold.set()
    await asyncio.wait_for(second, 1)
    assert slots.busy == 0 and slots.waiting() == 0


async def test_turns_bound_each_key_and_keep_nothing_for_an_idle_one() -> None:
    turns, inside, most = fairness.Turns(2), {"n": 0}, {"n": 0}
    gate = asyncio.Event()

    async def hold(key: str) -> None:
        async with turns.turn(key):
            inside["n"] += 1
            most["n"] = max(most["n"], inside["n"])
            await gate.wait()
            inside["n"] -= 1

    tasks = [asyncio.create_task(hold("ns")) for _ in range(5)]
    await asyncio.sleep(0.01)
    assert most["n"] == 2 and turns.holders("ns") == 5
    gate.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 1)
    assert turns.holders("ns") == 0 and not turns._keys


# ---- which events are activity reports alone ------------------------------------------------------
def _session(report: str | None, rv: str = "1", **status: Any) -> dict[str, Any]:
    annotations = {names.ANNOTATION_ACTIVITY: report} if report else {}
    meta = {"name": "s", "namespace": "a", "uid": "u", "resourceVersion": rv, "annotations": annotations}
    return {"metadata": meta, "spec": {"ttl": "1h"}, "status": dict(status)}


def test_only_a_changed_activity_annotation_is_an_activity_report() -> None:
    before = _session("2026-01-01T00:00:00Z busy=0")
    assert only_activity_changed(before, _session("2026-01-01T00:00:01Z busy=0", rv="2"))
    assert only_activity_changed(_session(None), _session("2026-01-01T00:00:01Z busy=0", rv="2"))
    assert not only_activity_changed(before, _session("2026-01-01T00:00:00Z busy=0", rv="2"))  # the same
    assert not only_activity_changed(before, _session("x", rv="2", phase="Ready"))  # and the status
    changed_spec = _session("2026-01-01T00:00:01Z busy=0", rv="2")
    changed_spec["spec"]["ttl"] = "2h"
    assert not only_activity_changed(before, changed_spec)
    assert not only_activity_changed(None, before)


# ---- the reconciler paces a session's activity reports, and loses none -----------------------------
@pytest.fixture
def kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
async def reconciler(kube: FakeKube) -> Any:
    rec = Reconciler(kube)  # type: ignore[arg-type]
    rec.cache.loaded = True
    yield rec
    await rec.scheduler.stop()


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _report(kube: FakeKube, rec: Reconciler, key: tuple[str, str], n: int) -> None:
    """The client's annotation write, and its watch event into the cache."""
    body = kube.sessions[key]
    meta = body["metadata"]
    meta.setdefault("annotations", {})[names.ANNOTATION_ACTIVITY] = format_activity(
        dt.datetime.now(dt.UTC) + dt.timedelta(milliseconds=n)
    )
    meta["resourceVersion"] = str(int(meta.get("resourceVersion") or 1) + 1)
    rec.remember_session(key, body)


async def test_an_activity_flood_costs_one_pass_per_interval_and_the_newest_report_wins(
    kube: FakeKube, reconciler: Reconciler, make_session: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fairness, "ACTIVITY_INTERVAL", 0.3)
    monkeypatch.setattr("agentsession_operator.kube.reconciler.ACTIVITY_INTERVAL", 0.3)
    key = store(kube, make_session(spec={"idleTimeout": "10m"}, created=_now()))
    await reconciler.reconcile(key, cause="created")
    reconciler.scheduler.start()
    writes = len(kube.writes)
    for n in range(100):  # a flood: 100 reports, each with its watch event
        _report(kube, reconciler, key, n)
        await reconciler.reconcile(key, cause="session MODIFIED")
    newest = kube.sessions[key]["metadata"]["annotations"][names.ANNOTATION_ACTIVITY]
    deadline = time.monotonic() + 5
    while kube.sessions[key].get("status", {}).get("lastActivityReport") != newest:
        assert time.monotonic() < deadline, "the newest report was never counted"
        await asyncio.sleep(0.05)
    status_writes = [w for w in kube.writes[writes:] if w[0] == "status"]
    assert 1 <= len(status_writes) <= 2, kube.writes[writes:]  # the first report at once, the newest paced


async def test_a_paced_report_never_pushes_back_an_earlier_deadline(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    key = store(kube, make_session(spec={"idleTimeout": "10m"}, created=_now()))
    await reconciler.reconcile(key, cause="created")
    _report(kube, reconciler, key, 1)
    await reconciler.reconcile(key, cause="session MODIFIED")  # the first report: a pass now
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    reconciler.scheduler.schedule(key, soon)  # say, an idle deadline (its pass reads the session first)
    _report(kube, reconciler, key, 2)
    await reconciler.reconcile(key, cause="session MODIFIED")  # paced: deferred, never past `soon`
    assert reconciler.scheduler.due(key) == soon


# ---- a waiting fork backs off, and its source's change wakes it at once -----------------------------
async def test_a_fork_waiting_on_its_source_looks_again_less_and_less_often(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    key = ("ns", "fork")
    delays = []
    for _ in range(6):
        now = dt.datetime.now(dt.UTC)
        reconciler.session_pass.schedule(key, ScheduleCheck(now + decide.FORK_RETRY, decide.FORK_WAITING))
        due = reconciler.scheduler.due(key)
        assert due is not None
        delays.append(round((due - now).total_seconds()))
    assert delays == [2, 4, 8, 16, 16, 16] and FORK_WAIT_CAP == 16
    reconciler.wake_forks("ns", "source")  # no fork of "source" in the cache: nothing woken, nothing reset
    assert reconciler.records.of(key).fork_waits == 6
    source = store(kube, make_session(name="source"))
    fork = make_session(name="fork", spec={"forkFrom": {"name": "source"}})
    reconciler.remember_session(key, fork)
    reconciler.wake_forks(*source)
    assert reconciler.records.of(key).fork_waits == 0  # the next wait starts at 2 s again
    now = dt.datetime.now(dt.UTC)
    recheck = ScheduleCheck(now + decide.FORK_RECHECK, decide.FORK_WAITING)  # a fork that cannot be made
    reconciler.session_pass.schedule(key, recheck)
    assert reconciler.scheduler.due(key) == recheck.at


# ---- a due deadline's pass: ahead of a backlog, but never starving it (issue 53 item 4) ----------
async def test_a_due_deadline_goes_ahead_of_a_backlog_without_starving_it() -> None:
    slots = FairSlots(limit=1)
    order: list[str] = []
    gate = asyncio.Event()

    async def work(name: str, due: bool = False) -> None:
        async with slots.slot("a", due=due):
            order.append(name)
            await gate.wait()

    busy = asyncio.create_task(work("first"))
    await asyncio.sleep(0)
    backlog = [asyncio.create_task(work(f"p{i}")) for i in range(4)]  # a take-over's passes
    await asyncio.sleep(0)
    deadlines = [asyncio.create_task(work(f"d{i}", due=True)) for i in range(3)]  # deadlines fell meanwhile
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(busy, *backlog, *deadlines)
    # The first deadline at the next turn, then turns alternate while both lanes wait.
    assert order == ["first", "d0", "p0", "d1", "p1", "d2", "p2", "p3"], order
    assert slots.busy == 0 and slots.waiting() == 0


async def test_a_cancelled_due_waiter_leaves_the_lane_clean() -> None:
    slots = FairSlots(limit=1)
    gate = asyncio.Event()
    ran: list[str] = []

    async def work(name: str, due: bool) -> None:
        async with slots.slot("a", due=due):
            ran.append(name)
            await gate.wait()

    holder = asyncio.create_task(work("holder", False))
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(work("cancelled", True))
    later = asyncio.create_task(work("later", False))
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(holder, later)
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert ran == ["holder", "later"] and slots.busy == 0 and slots.waiting() == 0


async def test_only_a_sessions_own_due_deadline_takes_the_lane_ahead() -> None:
    """A retry or a re-check takes the deadline path too; only a pass whose session's own deadline (as its
    status names it) has come goes ahead, so a tenant's failing passes never go ahead of another's create."""
    reconciler = Reconciler(FakeKube())  # type: ignore[arg-type]
    now = dt.datetime.now(dt.UTC)
    stamps = {"expired": now - dt.timedelta(seconds=1), "later": now + dt.timedelta(hours=1)}
    for name, at in stamps.items():
        reconciler.cache.sessions[("ns", name)] = {
            "metadata": {"namespace": "ns", "name": name},
            "status": {"phase": "Ready", "expiresAt": at.strftime("%Y-%m-%dT%H:%M:%SZ")},
        }
    reconciler.cache.sessions[("ns", "none")] = {"metadata": {"namespace": "ns", "name": "none"}}
    assert reconciler._lifecycle_due(("ns", "expired"))
    assert not reconciler._lifecycle_due(("ns", "later")) and not reconciler._lifecycle_due(("ns", "none"))
    assert not reconciler._lifecycle_due(("ns", "gone"))
