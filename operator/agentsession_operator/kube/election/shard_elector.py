"""Sharded leader election: one Lease per shard, a slot Lease per replica, rebalanced every round
(the rules: sharding.py; each Lease under lease.py's, through leader.py's LeaderElector).

Every retry_period one round: read every shard and slot Lease (and the single-Lease layout's Lease),
renew what this replica holds, count the live slots (the replicas), let go of the shards above its
share and take free or expired ones up to it. A shard is acted on only while its own elector says so
(`held`), a pure function of the clock and that Lease's last renewal: the fencing of the single Lease,
per shard. The reconciler is told of the shards gained and lost once per round (`on_change`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import agentsession_operator.kube.election.lease as rules
import agentsession_operator.kube.election.sharding as sharding
from agentsession_operator.infra import metrics
from agentsession_operator.infra.logs import logger
from agentsession_operator.kube.election.hold import Hold
from agentsession_operator.kube.election.layout_guard import LAYOUT_ANNOTATION, LayoutGuard
from agentsession_operator.kube.election.leader import LeaderElector, LeaseAPI, utcnow

_log = logger()


class ShardElector:
    def __init__(
        self,
        api: LeaseAPI,
        namespace: str,
        base: str,
        identity: str,
        count: int,
        timing: rules.Timing | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = utcnow,
        on_change: Callable[[set[int], set[int]], None] = lambda gained, lost: None,
    ) -> None:
        if not 1 < count <= sharding.MAX_SHARDS:
            raise ValueError(f"shards: expected 2 to {sharding.MAX_SHARDS}, got {count}")
        self.api = api
        self.namespace = namespace
        self.identity = identity
        self.count = count
        self.timing = timing or rules.Timing()
        self._clock = clock
        self.on_change = on_change
        self.order = sharding.preference(identity, count)
        layout = {LAYOUT_ANNOTATION: str(count)}

        def elector(name: str, **kwargs: Any) -> LeaderElector:
            return LeaderElector(
                api,
                namespace,
                name,
                identity,
                self.timing,
                clock=clock,
                wall=wall,
                annotations=layout,
                base=base,
                **kwargs,
            )

        self.shards = [
            elector(
                sharding.shard_lease_name(base, i),
                on_started_leading=lambda i=i: self._gained.add(i),
                on_stopped_leading=lambda i=i: self._lost.add(i),
            )
            for i in range(count)
        ]
        # As many slots as shards: a replica beyond that would get no shard anyway.
        self.slots = [elector(sharding.member_lease_name(base, j)) for j in range(count)]
        self.single = elector(base)  # the single-Lease layout's Lease: only watched, never taken
        self.guard = LayoutGuard(api, namespace, base, identity, count, self.timing, clock=clock)
        self._gained: set[int] = set()
        self._lost: set[int] = set()
        self._foreign = False  # a live Lease of another layout was seen last round
        self._first_round: float | None = None
        self._task: asyncio.Task[None] | None = None

    # ---- what the reconciler asks -------------------------------------------------------------------
    def held(self, shard: int) -> bool:
        return self.shards[shard].is_leader()

    def hold(self, shard: int) -> Hold | None:
        """The shard's hold for a write (kube/election/hold.py), None while not held."""
        return self.shards[shard].hold()

    def held_shards(self) -> list[int]:
        return [i for i in range(self.count) if self.held(i)]

    def is_leader(self) -> bool:
        """Holds at least one shard (agentsession_leader)."""
        return any(self.held(i) for i in range(self.count))

    def replicas(self) -> int:
        """The live slots: the replicas this one counts (itself included once it holds a slot)."""
        return sum(1 for slot in self.slots if slot.live_holder())

    # ---- a round ---------------------------------------------------------------------------------------
    async def _read(self, elector: LeaderElector) -> dict[str, Any] | None:
        return await self.api.get(self.namespace, elector.name)

    async def try_once(self) -> None:
        """One round: read, renew, count the replicas, release above the share, take up to it."""
        everyone = [*self.shards, *self.slots, self.single]
        read, blocked = await asyncio.gather(asyncio.gather(*(self._read(e) for e in everyone)), self.guard.blocked())
        leases = dict(zip((e.name for e in everyone), read, strict=True))
        await self.single.try_once(leases[self.single.name], take=False)
        has_slot = any(slot.is_leader() for slot in self.slots)
        for j in self.order:
            slot = self.slots[j]
            took = await slot.try_once(leases[slot.name], take=not has_slot)
            has_slot = has_slot or took
        foreign = self._foreign_layout(leases) or blocked
        share = 0 if foreign else sharding.target(self.count, self.replicas())
        held = self.held_shards()
        released = sharding.to_release(held, self.order, share)
        renewals = [self.shards[i].try_once(leases[self.shards[i].name], take=False) for i in held if i not in released]
        for shard in released:
            _log.info("shard released", shard=shard, share=share, replicas=self.replicas())
        # Renewals first, releases beside them: a release waits for its shard's writes under way (hold.py),
        # and the other shards' renewals must not wait behind it.
        await asyncio.gather(
            *renewals, *(self.shards[shard].release() for shard in released), return_exceptions=True
        )  # one failed renewal must not stop the others
        budget = sharding.may_take(len(held) - len(released), share)
        if self._first_round is None:
            self._first_round = self._clock()
        if self._clock() - self._first_round < self.timing.lease_duration:
            # Fresh: one shard per round, so replicas started together (a rollout, a scale-up) see each
            # other's slots before one takes (and lists) every shard only to let half of them go.
            budget = min(budget, 1)
        for shard in self.order:
            elector = self.shards[shard]
            if shard in held:
                continue
            if await elector.try_once(leases[elector.name], take=budget > 0 and not foreign):
                budget -= 1

    def _foreign_layout(self, leases: dict[str, dict[str, Any] | None]) -> bool:
        """A live Lease written under another shard count (or the single Lease held): two layouts map
        namespaces differently, so acting beside one could run two leaders for a session. Take nothing
        and let go of everything until it is gone (changing --shards: docs/operations.md)."""
        if self.single.live_holder():
            foreign = True
        else:
            foreign = False
            for elector in [*self.shards, *self.slots]:
                lease = leases.get(elector.name) or {}
                layout = ((lease.get("metadata") or {}).get("annotations") or {}).get(LAYOUT_ANNOTATION)
                holder = (lease.get("spec") or {}).get("holderIdentity")  # as read now, live as last judged
                if holder and holder == elector.live_holder() and holder != self.identity and layout != str(self.count):
                    foreign = True
        if foreign and not self._foreign:
            _log.error("a Lease of another shard layout is held: no shard is taken", shards=self.count)
        self._foreign = foreign
        return foreign

    async def _report(self) -> None:
        for elector in self.shards:
            await elector.notify()
        gained, lost = self._gained - self._lost, set(self._lost)
        gained |= self._gained & self._lost & set(self.held_shards())  # lost and regained in one round
        self._gained.clear()
        self._lost.clear()
        if gained or lost:
            _log.info("shards changed", gained=sorted(gained), lost=sorted(lost), held=self.held_shards())
            self.on_change(gained, lost)

    async def run(self) -> None:
        while True:
            started = self._clock()
            try:
                await asyncio.wait_for(self.try_once(), self.timing.round_timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the API is down or slow: each shard's hold expires by itself
                _log.warning("shard lease round failed", error=str(exc) or type(exc).__name__, held=self.held_shards())
            await self._report()
            await asyncio.sleep(max(0.0, started + self.timing.retry_period - self._clock()))

    def start(self) -> None:
        metrics.report_shards(self.count, self.held)  # agentsession_leader: the share of the shards held
        self._task = asyncio.create_task(self.run(), name="shard-election")

    async def stop(self) -> None:
        """Stop campaigning, then release every shard and the slot (a graceful shutdown: others take them
        at their next round)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.guard.close()
        await asyncio.gather(*(e.release() for e in [*self.shards, *self.slots]))
