"""Reconcile AgentSessions: the triggers, one pass at a time per session (coalesced), backoff, and the
rooms the passes use, wired together.

Level-triggered: every trigger (the session's own events, its claim's or Sandbox's events, a policy or
pool change, a deadline) runs the same full pass (kube/session_pass.py: observe, decide, act), and a
pass that finds nothing to change writes nothing, so the operator's own status writes settle after one
extra pass. The rooms: kube/cache.py (what the watches saw), kube/resync.py (priming and relists),
kube/policy_status.py, kube/forks.py, kube/orphans.py, kube/acting.py, kube/status_writer.py.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import functools
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from agentsession_operator.decisions import quota
from agentsession_operator.decisions.selectors import watched
from agentsession_operator.infra import metrics
from agentsession_operator.infra.logs import logger
from agentsession_operator.kube import clock, forks, orphans, owners
from agentsession_operator.kube import resync as relists
from agentsession_operator.kube.acting import Actor
from agentsession_operator.kube.agent_certificates import Authority, Signer
from agentsession_operator.kube.background import Background
from agentsession_operator.kube.cache import Cache, Key
from agentsession_operator.kube.client import Kube
from agentsession_operator.kube.election import Hold, HoldOf, NotLeader, bind, shard_of
from agentsession_operator.kube.fairness import ACTIVITY_INTERVAL, FairSlots, only_activity_changed
from agentsession_operator.kube.hibernation import Hibernator
from agentsession_operator.kube.node_agent import AgentSelector, NodeAgents, NodeTokens, TokenSource
from agentsession_operator.kube.places import Admitted
from agentsession_operator.kube.policy_status import PolicyStatus
from agentsession_operator.kube.primed_watch import PrimedVersions
from agentsession_operator.kube.scheduler import DeadlineScheduler
from agentsession_operator.kube.session_pass import Config, Rooms, SessionPass
from agentsession_operator.kube.session_records import Records
from agentsession_operator.kube.status_writer import SessionGone, StatusWriter
from agentsession_operator.kube.takeover import TakeOver, in_deadline_order, status_deadline

__all__ = ["Config", "NotLeader", "Reconciler", "SessionGone"]

MAX_RETRY_DELAY = 60.0
PACING_SLACK = 0.05  # seconds: a paced pass due this soon runs now (the scheduler's clock is the wall clock)
SHARD_RETRY = 2.0  # seconds before a shard's failed take-over listing is tried again
HOLD_RETRY = 1.0  # seconds before a pass abandoned for a hold too short to write goes again (still leading)
_acting_in: contextvars.ContextVar[str | None] = contextvars.ContextVar("acting_in", default=None)
"""The namespace of the pass under way (its writes are fenced by that namespace's shard)."""


class Shards(Protocol):
    """Which shards this replica holds now (kube/election/shard_elector.py)."""

    count: int

    def held(self, shard: int) -> bool: ...

    def hold(self, shard: int) -> Hold | None: ...


class Reconciler:
    def __init__(
        self,
        kube: Kube,
        config: Config | None = None,
        is_leader: Callable[[], bool] | None = None,
        shards: Shards | None = None,
        hold: HoldOf | None = None,
    ) -> None:
        self.kube = kube
        self.config = config or Config()
        self.cache = Cache()
        # Leadership (kube/election/leader.py): a standby keeps its cache current but never writes.
        self.is_leader: Callable[[], bool] = is_leader or (lambda: True)
        self._hold = hold  # the single Lease's hold a pass's writes are bound to (election/hold.py); None: no election
        # Sharding (kube/election/shard_elector.py): only the namespaces of held shards are cached and acted on,
        # and a shard only once its take-over listing is done (ready).
        self.shards = shards
        self.ready_shards: set[int] = set()
        self._shard_of = functools.lru_cache(maxsize=65536)(
            lambda namespace: shard_of(namespace, shards.count if shards else 1)
        )
        self.scheduler = DeadlineScheduler(self._on_deadline)
        self.background = Background()
        # What is remembered about each session between passes, one record each (kube/session_records.py).
        self.records = Records()
        # Fairness (kube/fairness.py): the passes' slots, taken by namespace in turn; the sessions whose
        # newest event changed only their activity annotation, and when each last had such a pass (records).
        self.slots = FairSlots()
        where = AgentSelector.parse(self.config.node_agent) if self.config.node_agent else None
        tokens: TokenSource | Path = self.config.node_agent_token
        if where and self.config.node_agent_account:
            tokens = NodeTokens(kube, self.config.node_agent_account)
        elif where:
            logger().warning(
                "node agents get one token, not one per node: --node-agent-account is not set",
                token_file=str(self.config.node_agent_token),
            )
        ca_secret = self.config.node_agent_ca_secret
        self.agent_authority = Authority(kube, *ca_secret) if where and ca_secret else None
        agents = NodeAgents(kube, where, tokens, trust=self.agent_authority) if where else None
        self.agent_signer = (
            Signer(kube, self.agent_authority, where.namespace, where.selector)
            if where and self.agent_authority
            else None
        )
        self.hibernator = Hibernator(
            kube,
            agents,
            self._event,
            self.config.max_checkpoint_bytes,
            spawn=self.background.spawn,
            used_bytes=self.cache.hibernated_bytes,
            aside=self.slots.aside,
        )
        self.actor = Actor(kube, self.cache, self._fence, self._event, self.hibernator, self.records)
        self.writer = StatusWriter(
            kube, self._fence, self._event, self.remember_session, self.session_deleted, self.records
        )
        rooms = Rooms(
            kube,
            self.cache,
            self.config,
            self.scheduler,
            self,
            self.actor,
            self.writer,
            self._event,
            self._fence,
            self.records,
        )
        self.session_pass = SessionPass(rooms)
        self.primed_versions = PrimedVersions()  # kopf's first listings watch from prime's (kube/primed_watch.py)
        self.admitted = Admitted()  # creates the webhook let through, until the cache has them
        self.takeover = TakeOver()  # when the first pass over every session a take-over gained is done
        self.resyncs = relists.Resync(kube, self.cache, self, self.background)
        self.policy_status = PolicyStatus(kube, self.cache, self.background, self.leads)

    @property
    def _background(self) -> set[asyncio.Task[None]]:
        """The tasks under way in the background (tests wait for them)."""
        return self.background.tasks

    def caches(self, namespace: str) -> bool:
        """Whether this replica keeps the namespace's sessions and children (its shard is held, or no
        sharding): the watch handlers drop every other event before storing anything."""
        return self.shards is None or self.shards.held(self._shard_of(namespace))

    def leads(self, namespace: str) -> bool:
        """Whether this replica may act on the namespace now: the leader (or the holder of its shard,
        once that shard's take-over listing is done)."""
        if not self.is_leader():
            return False
        if self.shards is None:
            return True
        shard = self._shard_of(namespace)
        return shard in self.ready_shards and self.shards.held(shard)

    def hold_of(self, namespace: str) -> HoldOf | None:
        """What a pass in `namespace` binds its writes to: its shard's hold once the shard is ready, or the
        single Lease's; None without election (the only replica)."""
        shards = self.shards
        if shards is None:
            return self._hold
        shard = self._shard_of(namespace)
        return lambda: shards.hold(shard) if shard in self.ready_shards else None

    def _fence(self) -> None:
        namespace = _acting_in.get()
        if not self.is_leader() or (self.shards is not None and (namespace is None or not self.leads(namespace))):
            raise NotLeader()

    def _event(self, obj: Mapping[str, Any], reason: str, message: str, type_: str = "Normal") -> None:
        """Post an Event in the background: a pass never waits for (or fails on) an Event."""
        self.background.spawn(self.kube.event(dict(obj), reason, message, type_))

    async def take_over(self) -> None:
        """Just became leader: reconcile every known session and look for orphans the standby ignored."""
        keys = list(self.cache.sessions)
        self.takeover.begin(key for key in keys if self.leads(key[0]))
        self._pass_in_deadline_order(keys, "leader took over")
        # In the background: the elector awaits this and renews the Lease only after it returns; orphan
        # checks against a slow API server outlasted the renew deadline, and every pass above was refused.
        self.background.spawn(orphans.collect_orphans(self.kube, self.cache, self._leads_claim))
        self.background.spawn(self.sweep_checkpoints())

    async def sweep_checkpoints(self) -> None:
        """The images of sessions gone while nobody watched (kube/hibernation.py: sweep), never failing."""
        try:
            await self.hibernator.sweep(lambda ns: watched(ns, self.namespaces) and self.leads(ns))
        except Exception as exc:  # the next take-over or resync sweeps again
            logger().warning("checkpoint sweep failed", error=str(exc)[:300])

    def _leads_claim(self, claim: Mapping[str, Any]) -> bool:
        return self.leads(str(claim["metadata"]["namespace"]))

    # ---- shards (kube/election/shard_elector.py calls shards_changed once per round) -------------------------
    def shards_changed(self, gained: set[int], lost: set[int]) -> None:
        """Lost shards: stop and forget their namespaces. Gained ones: a full listing of their namespaces
        first (the watch handlers dropped their events until now), then a pass over every session."""
        self._drop_shards(lost | (gained & self.ready_shards))
        if gained:
            self.background.spawn(self._take_shards(set(gained)))

    def _drop_shards(self, shards: set[int]) -> None:
        if not shards:
            return
        self.ready_shards -= shards
        cache = self.cache
        for namespace in [ns for ns in cache.sessions.namespaces() if self._shard_of(ns) in shards]:
            for key in cache.sessions_in(namespace):
                self._forget(key)
        for table in (cache.claims, cache.sandboxes, cache.network_policies):
            for key in [k for k in table if self._shard_of(k[0]) in shards]:
                del table[key]

    async def _take_shards(self, shards: set[int]) -> None:
        assert self.shards is not None
        while True:
            shards = {shard for shard in shards if self.shards.held(shard)}
            if not shards:
                return
            try:
                await relists.prime_children(self.kube, self.cache, self, functools.partial(self._in_shards, shards))
                break
            except Exception as exc:
                logger().warning(
                    "shard take-over listing failed; retrying", shards=sorted(shards), error=str(exc)[:300]
                )
                await asyncio.sleep(SHARD_RETRY)
        shards = {shard for shard in shards if self.shards.held(shard)}
        self.ready_shards |= shards
        namespaces = [ns for ns in self.cache.sessions.namespaces() if self._shard_of(ns) in shards]
        keys = [key for namespace in namespaces for key in self.cache.sessions_in(namespace)]
        self.takeover.begin(keys)
        self._pass_in_deadline_order(keys, "shard taken over")
        for namespace in {ns for ns in self.cache.policies if self._shard_of(ns) in shards}:
            self.policy_status.soon(namespace)
        for kind in ("sessions", "claims", "sandboxes"):  # deletions the listing raced with the watch
            self.resyncs.relisted(kind)
        self.background.spawn(orphans.collect_orphans(self.kube, self.cache, self._leads_claim))
        self.background.spawn(self.sweep_checkpoints())
        logger().info("shards taken over", shards=sorted(shards), namespaces=len(namespaces))

    def _in_shards(self, shards: set[int], namespace: str) -> bool:
        return self._shard_of(namespace) in shards and watched(namespace, self.namespaces)

    # ---- the cache's start and upkeep (kube/resync.py) ------------------------------------------
    namespaces: tuple[str, ...] = ()  # the --namespace patterns (prime sets them)

    async def prime(self, namespaces: tuple[str, ...] = ()) -> None:
        """The start-up listing; sharded, of policies and warm pools only (a shard lists its own when taken)."""
        self.namespaces = namespaces
        kinds = () if self.shards is not None else relists.PRIMED_KINDS
        timings: dict[str, float] = {}
        await relists.prime(self.kube, self.cache, self, namespaces, self.primed_versions, kinds, timings)
        self.takeover.listed(timings)

    def relisted(self, kind: str) -> None:
        self.resyncs.relisted(kind)

    async def resync(self, kind: str) -> list[Key]:
        return await self.resyncs.resync(kind)

    async def resync_forever(self, period: float = relists.RESYNC_PERIOD) -> None:
        await self.resyncs.forever(period, after=self.sweep_checkpoints)

    def unchanged(self, kind: str, key: Key, body: Mapping[str, Any]) -> bool:
        return relists.unchanged(self.cache, kind, key, body)

    # ---- whose child (kube/owners.py), orphans, policies, forks ---------------------------------
    def session_for_claim(self, claim: Mapping[str, Any]) -> Key | None:
        return owners.session_for_claim(claim)

    def session_for_network_policy(self, body: Mapping[str, Any]) -> Key | None:
        return owners.session_for_network_policy(body)

    def session_for_sandbox(self, sandbox: Mapping[str, Any]) -> Key | None:
        return owners.session_for_sandbox(self.cache.claims, sandbox)

    async def collect_orphan(self, claim: dict[str, Any]) -> bool:
        return await orphans.collect_orphan(self.kube, claim, lambda: self._leads_claim(claim))

    async def label_domains(self) -> list[str]:
        """agent-sandbox's allowed pod-label domains (read at most every LABEL_DOMAINS_TTL; admission too)."""
        return await self.session_pass.label_domains()

    async def update_policy_status(self, namespace: str, name: str) -> None:
        if self.leads(namespace):  # matchedSessions counts the cache: only the replica acting there has them
            await self.policy_status.update(namespace, name)

    def wake_forks(self, namespace: str, source: str) -> None:
        """A session changed: forks of it still without a claim are judged again now (it may be Ready),
        their polling backoff reset."""

        def wake(key: Key, cause: str, at: dt.datetime | None = None) -> None:
            record = self.records.get(key)
            if record is not None:
                record.fork_waits = 0
                self.records.prune(key)
            self.pass_soon(key, cause, at)

        forks.wake_forks(self.cache, namespace, source, wake)

    # ---- triggers ----------------------------------------------------------------------------
    def pass_soon(self, key: Key, cause: str, at: dt.datetime | None = None) -> None:
        """A pass over the cached body at `at` (now by default), for a trigger whose news is in the cache
        already (a policy, a pool, leadership, a provisioning step): no GET first, as a deadline's pass
        makes to act on the newest state (a policy change or a failover would make one per session)."""
        at = at or clock.now()
        self.scheduler.schedule(key, at)
        self.records.of(key).cached_due = (at, cause)

    def _pass_in_deadline_order(self, keys: list[Key], cause: str) -> None:
        """A pass over each of `keys`, the soonest due first (kube/takeover.py): a microsecond apart, since the
        scheduler orders passes due at the same moment by key (10,000 sessions span 10 ms)."""
        now = clock.now()
        for offset, key in enumerate(in_deadline_order(keys, self.cache.sessions.get)):
            self.pass_soon(key, cause, now + dt.timedelta(microseconds=offset))

    def pass_now(self, key: Key) -> None:
        """A pass at once, reading the session first (a child of it went unseen)."""
        self.scheduler.schedule(key, clock.now())

    async def _on_deadline(self, key: Key, at: dt.datetime) -> None:
        record = self.records.get(key)
        cached = record.cached_due if record is not None else None
        if record is not None and cached is not None:
            record.cached_due = None
            self.records.prune(key)
        if cached is not None and cached[0] == at:
            await self.reconcile(key, cause=cached[1])
            return
        lag = (clock.now() - at).total_seconds()
        await self.reconcile(key, cause="deadline", deadline_lag=lag)

    def trigger_namespace(self, namespace: str, cause: str) -> None:
        """Reconcile every known session of a namespace soon (a policy or pool changed)."""
        now = clock.now()
        for key in self.cache.sessions_in(namespace):
            self.pass_soon(key, cause, now)

    def remember_pool(self, key: Key, body: Mapping[str, Any]) -> None:
        """Cache a pool the watch saw: a session waiting for it stops asking the API server whether it exists."""
        self.cache.remember_pool(key, body)
        self.session_pass.missing_pools.appeared(key)

    def remember_session(self, key: Key, body: dict[str, Any]) -> None:
        """Cache the newest body of a session (every path goes through here) and see what its change moves."""
        before = self.cache.sessions.get(key)
        self.cache.remember_session(key, body)
        after = self.cache.sessions.get(key)
        if after is not before:
            if only_activity_changed(before, after):
                self.records.of(key).activity_only = True
            elif (record := self.records.get(key)) is not None and record.activity_only:
                record.activity_only = False
                self.records.prune(key)
            self._session_changed(key[0], before, after)

    def _session_changed(self, namespace: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        """A session appeared, changed or went: whom that wakes is decided by decisions.quota.wake_ups (a
        place freed under maxSessionsPerNamespace, a place moved in a capped label group, the policies'
        matchedSessions); this only schedules it."""
        wake = quota.wake_ups(
            namespace,
            before,
            after,
            list((self.cache.policies.get(namespace) or {}).values()),
            self.config.max_sessions_per_namespace,  # every namespace is capped, with a policy or not
            lambda: self.cache.places.in_namespace(namespace),
            lambda: self.cache.scan_bodies_in(namespace),
        )
        for name in wake.freed:
            self.pass_soon((namespace, name), "a place under maxSessionsPerNamespace freed")
        now = clock.now()
        for woken in wake.moved:
            due = self.scheduler.due(woken)
            if due is None or due > now:  # already due: a burst wakes each session once
                self.pass_soon(woken, "its place in a capped group moved", now)
        if wake.matched_changed:
            self.policy_status.soon(namespace)

    def session_deleted(self, key: Key, uid: str | None) -> None:
        """The session (this UID) is deleted: forget it, and never act on a body of it again."""
        cached = self.cache.sessions.get(key)
        cached_uid = (cached or {}).get("metadata", {}).get("uid")
        self.cache.session_deleted(uid)
        if not uid or not cached_uid or cached_uid == uid:  # not a newer session of the same name
            if cached is not None and self.leads(key[0]):
                self.hibernator.forget_soon(cached)  # its checkpoint image, if it hibernated
            self.forget(key)

    def forget(self, key: Key) -> None:
        body = self._forget(key)
        if body is not None:  # a slot may have freed; matchedSessions changed
            self._session_changed(key[0], body, None)

    def _forget(self, key: Key) -> dict[str, Any] | None:
        body = self.cache.sessions.get(key)
        self.cache.forget_session(key)
        self.scheduler.cancel(key)
        self.writer.forget(key)  # its phase no longer counted
        self.records.drop(key)
        self.takeover.passed(key)  # gone: a take-over waits no longer for its pass
        return body

    # ---- the pass: one at a time per session, retried with backoff --------------------------------
    async def reconcile(self, key: Key, cause: str, deadline_lag: float | None = None, fresh: bool = False) -> None:
        """One pass. `fresh` re-reads the session from the API first (deadlines act on the newest state);
        otherwise the newest body the watch or our own writes delivered is used."""
        if not self.leads(key[0]):
            return  # take_over() (a shard's: _take_shards) reconciles every session on becoming leader
        if not self.cache.loaded:
            # Never judge a session without its policies: try again once they are loaded.
            self.scheduler.schedule(key, clock.now() + dt.timedelta(seconds=1))
            return
        if deadline_lag is None and not fresh and self._paced(key):
            return
        record = self.records.of(key)
        if record.lock is not None and record.lock.locked():
            # A pass is running: it will run once more for everything that arrived meanwhile.
            was_fresh = record.again[1] if record.again is not None else False
            record.again = (cause, was_fresh or fresh or deadline_lag is not None)
            return
        lock = record.lock = record.lock or asyncio.Lock()
        try:
            async with lock:
                await self._fair_pass(key, cause, deadline_lag, fresh)
                while record.again is not None:
                    (cause, fresh), record.again = record.again, None
                    await self._fair_pass(key, cause, None, fresh)
        finally:
            # No pass ever waits on the lock (one arriving meanwhile marks the record above): a session at
            # rest keeps none (a lock per cached session, 60,000 waiting ones, issue 28 item 2).
            if record.lock is lock and not lock.locked():
                record.lock = None
                if self.records.get(key) is record:
                    self.records.prune(key)

    def _paced(self, key: Key) -> bool:
        """A pass for an activity report alone, less than ACTIVITY_INTERVAL after the last: deferred to the
        interval's end (the cached body then has the newest report). An earlier deadline is kept: its pass
        reads the session and counts the report."""
        record = self.records.get(key)
        if record is None or not record.activity_only:
            return False
        last = record.activity_passed
        wait = ACTIVITY_INTERVAL - (time.monotonic() - last) if last is not None else 0.0
        if wait <= PACING_SLACK:
            return False
        at = clock.now() + dt.timedelta(seconds=wait)
        due = self.scheduler.due(key)
        if due is None or due > at:
            self.pass_soon(key, "activity reports, paced", at)
        return True

    async def _fair_pass(self, key: Key, cause: str, deadline_lag: float | None, fresh: bool) -> None:
        """One pass in a slot of its namespace's turn (kube/fairness.py); a due lifecycle deadline's goes ahead."""
        async with self.slots.slot(key[0], due=deadline_lag is not None and self._lifecycle_due(key)):
            record = self.records.get(key)
            if record is not None and record.activity_only:
                record.activity_passed = time.monotonic()
                record.activity_only = False
            await self._pass(key, cause, deadline_lag, fresh)

    def _lifecycle_due(self, key: Key) -> bool:
        """Whether the session's own deadline (its TTL, idle timeout or a lowered maxTtl, as its status names
        it) has come: only such a pass takes the lane ahead; a retry or a re-check, which take the deadline
        path too, wait their turn as any pass (a tenant's failing passes must not go ahead of another's create)."""
        at = status_deadline(self.cache.sessions.get(key))
        return at is not None and at <= clock.now()

    async def _pass(self, key: Key, cause: str, deadline_lag: float | None, fresh: bool) -> None:
        started = time.monotonic()
        acting = _acting_in.set(key[0])
        try:
            with bind(self.hold_of(key[0])):  # every write of the pass, retries and Events included
                await self.session_pass.run(key, cause, deadline_lag, fresh or deadline_lag is not None)
            if (record := self.records.get(key)) is not None and record.failures:
                record.failures = 0
        except NotLeader:
            logger(namespace=key[0], session=key[1]).info("not leader: pass abandoned before writing", cause=cause)
            if self.leads(key[0]):
                # Still leading: a write found the hold too short to go (kube/election/hold.py), and the renewal that
                # comes next is no new term, so no take-over would pass the session again. A lost hold does
                # not come here (leads() is False; the next take-over passes every session).
                self.scheduler.schedule(key, clock.now() + dt.timedelta(seconds=HOLD_RETRY))
        except SessionGone:
            logger(namespace=key[0], session=key[1]).info("session deleted: pass abandoned", cause=cause)
        except Exception as exc:
            metrics.RECONCILE_ERRORS.labels(kind=type(exc).__name__).inc()
            record = self.records.of(key)
            failures = record.failures = record.failures + 1
            delay = min(MAX_RETRY_DELAY, 0.5 * 2**failures)
            logger(namespace=key[0], session=key[1]).warning(
                "reconcile failed; retrying", error=str(exc), cause=cause, retry_in=delay
            )
            self.scheduler.schedule(key, clock.now() + dt.timedelta(seconds=delay))
        finally:
            _acting_in.reset(acting)
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
            self.takeover.passed(key)
