"""Issue 54 item 1: every write bound to the hold that allows it (kube/election/hold.py, kube/transport.py).

Attack (a failure, not a tenant): the fence was checked once, before a request, which could then wait on a
Retry-After gate or be sent again for tens of seconds against a 3 s margin, and land after a standby took
the Lease: two leaders wrote in one term. A graceful release let go of the Lease with writes still under way.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentsession_operator.kube import transport
from agentsession_operator.kube.api import ApiException
from agentsession_operator.kube.election import hold as holds
from agentsession_operator.kube.election.hold import Hold, NotLeader
from tests.unit.operator.test_op_lease import Clock, FakeLeases, T, elector
from tests.unit.operator.test_op_transport import Clock as GateClock
from tests.unit.operator.test_op_transport import Upstream, _exc


class Held:
    """A hold that a test renews or loses."""

    def __init__(self, clock: GateClock, until: float, lease: str = "shard-0") -> None:
        self.clock, self.until, self.lease, self.lost = clock, until, lease, False

    def __call__(self) -> Hold | None:
        return None if self.lost else Hold(self.lease, self.until)


async def test_a_write_parked_behind_retry_after_past_the_hold_never_lands() -> None:
    clock = GateClock()
    hold = Held(clock, until=clock() + 5.0)
    upstream = Upstream(clock, [_exc(429, "10")])
    send = transport.wrap(upstream, transport.Gate(clock, clock.sleep))
    with holds.bind(hold), pytest.raises(NotLeader, match="past the hold"):
        await send("PATCH", "/sessions/s/status")
    assert len(upstream.sent) == 1  # the first try only: the second would have landed 10 s on, past the hold
    assert clock.slept == []  # refused at once, not after waiting


async def test_a_hold_lost_while_the_gate_was_closed_sends_nothing_more() -> None:
    clock = GateClock()
    hold = Held(clock, until=clock() + 30.0)

    class LosingAfterTheFirst(Upstream):
        async def __call__(self, method: str, url: str, *args: Any, **kwargs: Any) -> str:
            try:
                return await super().__call__(method, url, *args, **kwargs)
            finally:
                hold.lost = True  # the renewals failed meanwhile

    upstream = LosingAfterTheFirst(clock, [_exc(429, "2")])
    send = transport.wrap(upstream, transport.Gate(clock, clock.sleep))
    with holds.bind(hold), pytest.raises(NotLeader):
        await send("POST", "/claims")
    assert len(upstream.sent) == 1


async def test_a_write_under_a_renewed_hold_goes_with_the_rest_of_the_hold_as_its_deadline() -> None:
    clock = GateClock()
    hold = Held(clock, until=clock() + 6.0)
    seen: list[Any] = []

    async def request(method: str, url: str, *, timeout: Any = None, **kwargs: Any) -> str:
        seen.append((timeout, kwargs.get("query")))
        if len(seen) == 1:
            hold.until = clock() + 9.0  # a renewal while the first try was out
            raise _exc(503, "1")
        return "ok"

    send = transport.wrap(request, transport.Gate(clock, clock.sleep))
    with holds.bind(hold):
        assert await send("PATCH", "/claims/c", query=[("fieldManager", "x")]) == "ok"
    assert seen[0] == (5.0, [("fieldManager", "x"), ("timeout", "5s")])  # 6 s of hold, 1 s of margin
    assert seen[1] == (7.0, [("fieldManager", "x"), ("timeout", "7s")])  # the renewed hold, 1 s later


async def test_reads_and_unbound_writes_are_not_held() -> None:
    clock = GateClock()
    upstream = Upstream(clock, [])
    send = transport.wrap(upstream, transport.Gate(clock, clock.sleep))
    with holds.bind(lambda: None):
        assert await send("GET", "/sessions") == "ok"  # a read never writes
    assert await send("POST", "/events") == "ok"  # no election: nothing to bind to
    assert [timeout for _, _, timeout in upstream.sent] == [transport.REQUEST_TIMEOUT] * 2


async def test_a_write_never_changes_lease_midway() -> None:
    """A retry under another Lease's hold (the shard lost and a new term begun) is not the write's hold."""
    clock = GateClock()
    hold = Held(clock, until=clock() + 30.0)

    class Moving(Upstream):
        async def __call__(self, method: str, url: str, *args: Any, **kwargs: Any) -> str:
            try:
                return await super().__call__(method, url, *args, **kwargs)
            finally:
                hold.lease = "shard-1"

    upstream = Moving(clock, [_exc(429, "1")])
    with holds.bind(hold), pytest.raises(NotLeader, match="shard-0"):
        await transport.wrap(upstream, transport.Gate(clock, clock.sleep))("PUT", "/networkpolicies/p")


async def test_a_release_waits_for_the_writes_under_way_before_it_lets_go() -> None:
    api, clock = FakeLeases(), Clock()
    leader = elector(api, clock, "a")
    assert await leader.try_once()
    order: list[str] = []
    landed = asyncio.Event()

    async def write() -> None:
        with holds.IN_FLIGHT.writing(leader.name):
            await landed.wait()
            order.append("write landed")

    writing = asyncio.create_task(write())
    await asyncio.sleep(0)  # the write is under way
    releasing = asyncio.create_task(leader.release())
    await asyncio.sleep(0)
    assert not leader.is_leader()  # no new write goes from now
    assert api.obj is not None and api.obj["spec"]["holderIdentity"] == "a"  # but the Lease is still held
    landed.set()
    await asyncio.gather(writing, releasing)
    order.append("released" if api.obj["spec"]["holderIdentity"] is None else "held")
    assert order == ["write landed", "released"]


async def test_an_elector_gives_its_hold_until_the_renew_deadline() -> None:
    api, clock = FakeLeases(), Clock()
    leader = elector(api, clock, "a")
    assert leader.hold() is None
    assert await leader.try_once()
    assert leader.hold() == Hold("lease", clock() + T.renew_deadline)
    clock.t += T.renew_deadline
    assert leader.hold() is None


def test_the_server_deadline_is_whole_seconds_down_and_never_zero() -> None:
    assert holds.server_timeout(5.9) == "5s"
    assert holds.server_timeout(0.2) == "1s"


async def test_a_refused_write_surfaces_the_api_error_not_a_hold_error() -> None:
    clock = GateClock()
    hold = Held(clock, until=clock() + 30.0)
    upstream = Upstream(clock, [ApiException(status=422, reason="Invalid")])
    with holds.bind(hold), pytest.raises(ApiException):
        await transport.wrap(upstream, transport.Gate(clock, clock.sleep))("POST", "/claims")


async def test_every_write_under_a_hold_is_counted_by_lease() -> None:
    from agentsession_operator.infra import metrics

    clock = GateClock()
    before = metrics.HELD_WRITES.labels(lease="shard-7", term="0")._value.get()
    send = transport.wrap(Upstream(clock, [_exc(429, "1")]), transport.Gate(clock, clock.sleep))
    with holds.bind(Held(clock, until=clock() + 30.0, lease="shard-7")):
        await send("POST", "/claims")
    assert metrics.HELD_WRITES.labels(lease="shard-7", term="0")._value.get() - before == 2  # each attempt sent


async def test_a_release_with_writes_still_under_way_leaves_the_lease_to_expire() -> None:
    """A write that outlasts the drain must not land after a standby took the released Lease: not released."""
    api, clock = FakeLeases(), Clock()
    leader = elector(api, clock, "a")
    assert await leader.try_once()
    with holds.IN_FLIGHT.writing(leader.name):
        await leader.release()  # the fake clock never moves: the real drain timeout (round_timeout / 2) passes
    assert not leader.is_leader()
    assert api.obj is not None and api.obj["spec"]["holderIdentity"] == "a"  # expires by itself


async def test_a_hold_names_its_term_and_a_new_holder_makes_a_new_one() -> None:
    """The term (the Lease's leaseTransitions when taken) labels the writes: a take-over must not share it."""
    api, clock = FakeLeases(), Clock()
    first, second = elector(api, clock, "a"), elector(api, clock, "b")
    assert await first.try_once()
    held = first.hold()
    assert held is not None and held.term == 0
    assert await first.try_once()  # a renewal is the same term
    assert (first.hold() or held).term == 0
    assert not await second.try_once()  # b sees a's record; a stops renewing from now
    clock.t += T.lease_duration + 1  # a full lease duration of silence: b may take it
    assert await second.try_once()
    taken = second.hold()
    assert taken is not None and taken.term == 1
