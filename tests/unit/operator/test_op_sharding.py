"""Sharding (election/sharding.py rules, election/shard_elector.py rounds, the reconciler's gate) against a fake
Lease API of many Leases and a fake clock: who holds which shard as replicas join and leave, and that no
shard ever has two holders acting at once."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
from collections import Counter
from typing import Any

import pytest

from agentsession_operator.kube.election import lease as rules
from agentsession_operator.kube.election import sharding
from agentsession_operator.kube.election.layout_guard import LayoutGuard
from agentsession_operator.kube.election.leader import Conflict, LeaderElector
from agentsession_operator.kube.election.shard_elector import LAYOUT_ANNOTATION, ShardElector
from agentsession_operator.kube.reconciler import NotLeader, Reconciler, _acting_in

T = rules.Timing(lease_duration=10.0, renew_deadline=7.0, retry_period=2.0)


# ---- the pure rules ------------------------------------------------------------------------------
def test_a_namespace_has_one_stable_shard_and_namespaces_spread() -> None:
    assert sharding.shard_of("team-a", 4) == sharding.shard_of("team-a", 4)  # no per-process hash seed
    spread = Counter(sharding.shard_of(f"ns-{i}", 4) for i in range(400))
    assert set(spread) == {0, 1, 2, 3} and min(spread.values()) > 60


def test_preference_is_a_permutation_that_differs_between_replicas() -> None:
    a, b = sharding.preference("a_1", 8), sharding.preference("b_2", 8)
    assert sorted(a) == sorted(b) == list(range(8))
    assert a == sharding.preference("a_1", 8) and a != b


@pytest.mark.parametrize(("count", "replicas", "share"), [(4, 1, 4), (4, 2, 2), (4, 3, 2), (3, 2, 2), (2, 5, 1)])
def test_share_is_rounded_up_so_the_replicas_hold_every_shard(count: int, replicas: int, share: int) -> None:
    assert sharding.target(count, replicas) == share
    assert sharding.target(count, 0) == count  # no slot counted yet: as if alone


def test_release_lets_go_of_the_least_preferred_above_the_share() -> None:
    order = [3, 0, 2, 1]
    assert sharding.to_release({0, 1, 2, 3}, order, 2) == [1, 2]
    assert sharding.to_release({0, 3}, order, 2) == []
    assert sharding.may_take(1, 2) == 1 and sharding.may_take(3, 2) == 0


# ---- rounds against a fake API -------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def wall(self) -> dt.datetime:
        return dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=self.t)


class FakeLeases:
    """Many Leases by name, with resourceVersions (a stale write: Conflict)."""

    def __init__(self) -> None:
        self.objs: dict[str, dict[str, Any]] = {}
        self.rv = 0

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objs.get(name))

    async def list(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        key, _, value = selector.partition("=")
        return [copy.deepcopy(o) for o in self.objs.values() if (o["metadata"].get("labels") or {}).get(key) == value]

    async def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if body["metadata"]["name"] in self.objs:
            raise Conflict("exists")
        return self._store(body)

    async def replace(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if body["metadata"].get("resourceVersion") != self.objs[name]["metadata"]["resourceVersion"]:
            raise Conflict("stale resourceVersion")
        return self._store(body)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj = copy.deepcopy(body)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objs[obj["metadata"]["name"]] = obj
        return copy.deepcopy(obj)


def replica(api: FakeLeases, clock: Clock, me: str, count: int = 4) -> ShardElector:
    changes: list[tuple[set[int], set[int]]] = []
    elector = ShardElector(
        api, "ns", "op", me, count, T, clock=clock, wall=clock.wall, on_change=lambda g, lost: changes.append((g, lost))
    )
    elector.changes = changes  # type: ignore[attr-defined]
    return elector


async def rounds(clock: Clock, alive: list[ShardElector], everyone: list[ShardElector], n: int) -> None:
    """`n` rounds of the live replicas, one retry period apart; after each, no shard acted on twice."""
    for _ in range(n):
        for elector in alive:
            await elector.try_once()
            await elector._report()
        for shard in range(everyone[0].count):
            assert sum(e.held(shard) for e in everyone) <= 1, f"shard {shard} held twice"
        clock.t += T.retry_period


def test_a_joining_replica_gets_its_share_and_a_leaving_ones_shards_move() -> None:
    async def scenario() -> None:
        api, clock = FakeLeases(), Clock()
        a = replica(api, clock, "a_1")
        await rounds(clock, [a], [a], 2)
        assert len(a.held_shards()) == 2  # fresh: one shard per round (replicas started together share)
        await rounds(clock, [a], [a], 4)
        assert a.held_shards() == [0, 1, 2, 3] and a.replicas() == 1
        b = replica(api, clock, "b_2")
        await rounds(clock, [a, b], [a, b], 3)
        assert len(a.held_shards()) == 2 and len(b.held_shards()) == 2, (a.held_shards(), b.held_shards())
        assert a.replicas() == b.replicas() == 2
        assert set().union(*(gained for gained, _ in b.changes)) == set(b.held_shards())  # type: ignore[attr-defined]
        # b dies (no more rounds, no release): a takes its shards once their Leases expire, not before.
        b_shards = set(b.held_shards())
        killed = clock.t
        while not b_shards <= set(a.held_shards()):
            await rounds(clock, [a], [a, b], 1)
            assert clock.t - killed <= T.lease_duration + 2 * T.retry_period
        assert clock.t - killed >= T.lease_duration
        assert a.held_shards() == [0, 1, 2, 3]

    asyncio.run(scenario())


def test_a_graceful_stop_hands_the_shards_over_at_the_next_round() -> None:
    async def scenario() -> None:
        api, clock = FakeLeases(), Clock()
        a, b = replica(api, clock, "a_1"), replica(api, clock, "b_2")
        await rounds(clock, [a, b], [a, b], 4)
        assert len(b.held_shards()) == 2
        await b.stop()
        assert not b.held_shards()
        await rounds(clock, [a], [a, b], 3)
        assert a.held_shards() == [0, 1, 2, 3]

    asyncio.run(scenario())


def test_no_shard_is_taken_while_a_lease_of_another_layout_is_held() -> None:
    async def scenario() -> None:
        api, clock = FakeLeases(), Clock()
        old = replica(api, clock, "old_1", count=2)
        await rounds(clock, [old], [old], 2)
        new = replica(api, clock, "new_2", count=4)
        for _ in range(8):
            await old.try_once()
            await new.try_once()
            clock.t += T.retry_period
            assert not new.held_shards()
        assert api.objs["op-shard-0"]["metadata"]["annotations"][LAYOUT_ANNOTATION] == "2"
        await old.stop()
        for _ in range(3):
            await new.try_once()
            clock.t += T.retry_period
        assert new.held_shards() == [0, 1, 2, 3]

    asyncio.run(scenario())


def test_a_held_single_lease_blocks_every_shard() -> None:
    async def scenario() -> None:
        api, clock = FakeLeases(), Clock()
        await api.create(
            "ns", {"metadata": {"name": "op"}, "spec": {"holderIdentity": "legacy", "leaseDurationSeconds": 10}}
        )
        new = replica(api, clock, "new_2")
        for _ in range(3):
            await new.try_once()
            clock.t += T.retry_period
        assert not new.held_shards()

    asyncio.run(scenario())


# ---- issue 54 item 1: every Lease of the operator in one labelled list ------------------------------------


def _held_by(api: FakeLeases, clock: Clock, name: str, holder: str, layout: str | None) -> None:
    """A Lease a replica of another layout holds and renews (as it writes them: labelled as the operator's)."""
    body: dict[str, Any] = {
        "metadata": {"name": name, "labels": {"agentsession.dev/lease-of": "op"}},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 10, "renewTime": clock.wall().isoformat()},
    }
    if layout is not None:
        body["metadata"]["annotations"] = {LAYOUT_ANNOTATION: layout}
    if name in api.objs:
        body["metadata"]["resourceVersion"] = api.objs[name]["metadata"]["resourceVersion"]
        api._store(body)
    else:
        api._store(body)


def test_a_replica_of_fewer_shards_takes_nothing_beside_one_of_more_holding_only_the_high_shards() -> None:
    """`--shards 4 -> 2`: the old replica holds shards 2 and 3 (and slot 2), which the new layout never names.
    Both layouts map some namespaces to a shard each holds: two leaders for those sessions."""

    async def scenario() -> None:
        api, clock = FakeLeases(), Clock()
        new = replica(api, clock, "new_2", count=2)
        for _ in range(8):
            for name in ("op-shard-2", "op-shard-3", "op-member-2"):
                _held_by(api, clock, name, "old_1", "4")
            await new.try_once()
            clock.t += T.retry_period
            assert not new.held_shards()

    asyncio.run(scenario())


def test_a_single_lease_replica_takes_nothing_beside_a_sharded_one() -> None:
    """A default replica (one Lease) started beside sharded ones: it leads every namespace while they lead theirs."""

    async def scenario() -> None:
        api, clock = FakeLeases(), Clock()
        single = LeaderElector(
            api,
            "ns",
            "op",
            "default_3",
            T,
            clock=clock,
            wall=clock.wall,
            guard=LayoutGuard(api, "ns", "op", "default_3", 1, T, clock=clock),
        )
        for _ in range(8):
            _held_by(api, clock, "op-shard-0", "sharded_1", "2")
            await single.round()
            clock.t += T.retry_period
            assert not single.is_leader()
        for _ in range(8):  # the sharded replica gone: its Lease expires, then the single one is taken
            await single.round()
            clock.t += T.retry_period
            if single.is_leader():
                break
        assert single.is_leader()
        assert api.objs["op"]["metadata"]["labels"] == {"agentsession.dev/lease-of": "op"}

    asyncio.run(scenario())


# ---- the reconciler's gate -----------------------------------------------------------------------
class Held:
    def __init__(self, count: int, held: set[int]) -> None:
        self.count, self.shards = count, held

    def held(self, shard: int) -> bool:
        return shard in self.shards


def _namespace_in(shard: int, count: int) -> str:
    return next(f"ns-{i}" for i in range(1000) if sharding.shard_of(f"ns-{i}", count) == shard)


def test_a_replica_caches_only_held_shards_and_acts_only_once_a_shard_is_listed() -> None:
    shards = Held(2, {0})
    reconciler = Reconciler(None, shards=shards)  # type: ignore[arg-type]
    mine, theirs = _namespace_in(0, 2), _namespace_in(1, 2)
    assert reconciler.caches(mine) and not reconciler.caches(theirs)
    assert not reconciler.leads(mine)  # held, but its take-over listing has not run
    reconciler.ready_shards.add(0)
    assert reconciler.leads(mine) and not reconciler.leads(theirs)
    token = _acting_in.set(mine)
    try:
        reconciler._fence()  # acting in a held, listed shard: allowed
        shards.shards.clear()  # the Lease lapsed mid-pass
        with pytest.raises(NotLeader):
            reconciler._fence()
    finally:
        _acting_in.reset(token)
    with pytest.raises(NotLeader):
        reconciler._fence()  # sharded, a write outside any pass names no namespace: refused


def test_losing_a_shard_forgets_its_namespaces_and_keeps_the_others() -> None:
    reconciler = Reconciler(None, shards=Held(2, {0, 1}))  # type: ignore[arg-type]
    reconciler.ready_shards = {0, 1}
    mine, lost = _namespace_in(0, 2), _namespace_in(1, 2)
    for ns in (mine, lost):
        body = {"metadata": {"namespace": ns, "name": "s", "uid": f"u-{ns}", "resourceVersion": "1"}}
        reconciler.cache.remember_session((ns, "s"), body)
        reconciler.cache.claims[(ns, "s")] = body
    reconciler.shards_changed(set(), {1})
    assert list(reconciler.cache.sessions) == [(mine, "s")] and list(reconciler.cache.claims) == [(mine, "s")]
    assert reconciler.ready_shards == {0}


def test_a_lease_list_that_fails_keeps_the_last_verdict() -> None:
    """A round's renewal must not hang on one more request's luck (test_api_faults: connections reset)."""

    async def scenario() -> None:
        api, clock = FakeLeases(), Clock()
        guard = LayoutGuard(api, "ns", "op", "me", 1, T, clock=clock)
        _held_by(api, clock, "op-shard-0", "sharded_1", "2")
        assert await guard.blocked()

        async def reset(namespace: str, selector: str) -> list[dict[str, Any]]:
            raise ConnectionResetError("reset by peer")

        api.list = reset  # type: ignore[method-assign]
        assert await guard.blocked()  # blocked still: the last verdict
        await asyncio.sleep(0)  # the failed list, in the background
        assert await guard.blocked()
        guard._blocked_by = []
        assert not await guard.blocked()  # and not blocked when it last was not

    asyncio.run(scenario())
