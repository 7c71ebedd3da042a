"""Reconcile one AgentSession: observe (cache, then the API), decide (decisions/), act (client.py).

Level-triggered: every trigger (the session's own events, its claim's or Sandbox's events, a policy or
pool change, a deadline) runs the same full pass, and a pass that finds nothing to change writes
nothing, so the operator's own status writes settle after one extra pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from kubernetes_asyncio.client.rest import ApiException

from agentsession_api import names, phases
from agentsession_api.phases import Phase
from agentsession_api.timestamps import parse_time
from agentsession_operator import constants as c
from agentsession_operator.decisions import decide, fork, naming, network, policy, quota, refusals
from agentsession_operator.decisions import status as session_status
from agentsession_operator.decisions.actions import (
    DEFAULT_EXPIRY_WARNING,
    PROGRESS_CHECK,
    Action,
    ApplyNetworkPolicy,
    CreateClaim,
    DeleteClaim,
    PatchClaim,
    PatchSandbox,
    ScheduleCheck,
    Warn,
    patch_changes,
)
from agentsession_operator.decisions.ownership import is_owned_by
from agentsession_operator.decisions.selectors import watched
from agentsession_operator.infra import metrics
from agentsession_operator.infra.logs import logger
from agentsession_operator.kube.cache import Cache, Key, same_version, unseen_deletions
from agentsession_operator.kube.client import Kube
from agentsession_operator.kube.scheduler import DeadlineScheduler

LABEL_DOMAINS_TTL = 60.0  # seconds between reads of agent-sandbox-config
RESYNC_DEBOUNCE = 2.0  # seconds after a listing's last event before listing again (the burst is over)
RESYNC_PERIOD = 300.0  # a relist that found nothing delivers no event at all: list anyway, this often
RESYNC_KINDS = ("policies", "pools", "sessions", "claims", "sandboxes")
T = TypeVar("T")
PRIMED_KINDS = ("claims", "sandboxes", "network_policies", "sessions")
MAX_RETRY_DELAY = 60.0
AGAIN_DELAY = 0.2  # seconds before the pass a claim create's 409 asks for
POLICY_STATUS_DEBOUNCE = 2.0  # seconds: matchedSessions follows session changes this late, once per burst


@dataclass
class Config:
    agent_sandbox_namespace: str = "agent-sandbox-system"
    agent_sandbox_configmap: str = "agent-sandbox-config"
    network: network.NetworkSettings = field(default_factory=network.NetworkSettings)
    expiry_warning: dt.timedelta | None = DEFAULT_EXPIRY_WARNING
    """How long before its expiry a session gets an ExpiringSoon Warning Event (None: never)."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class NotLeader(Exception):
    """This replica is (no longer) the leader: it must not write; the leader's pass covers it."""


class SessionGone(Exception):
    """The session this pass acts for was deleted meanwhile: nothing more is written for it."""


def _phase(status: dict[str, Any] | None) -> str | None:
    return (status or {}).get("phase")


class Reconciler:
    def __init__(self, kube: Kube, config: Config | None = None) -> None:
        self.kube = kube
        self.config = config or Config()
        self.cache = Cache()
        self.scheduler = DeadlineScheduler(self._on_deadline)
        self._locks: dict[Key, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._failures: dict[Key, int] = defaultdict(int)
        self._phases: dict[Key, str] = {}
        self._label_domains: tuple[float, list[str]] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._dirty: dict[Key, tuple[str, bool]] = {}
        self._create_refused: set[Key] = set()  # sessions whose claim create met an existing claim
        # Deadlines whose pass reads the cached body (see pass_soon), with their cause.
        self._cached_due: dict[Key, tuple[dt.datetime, str]] = {}
        self._progress_written: dict[Key, dt.datetime] = {}  # provisioning sessions' last progress write
        self._resync_due: set[str] = set()  # kinds whose listing-driven resync is pending
        self._listed_at: dict[str, float] = {}  # when kopf last delivered a listed object, per kind
        self._policy_status_due: set[str] = set()  # namespaces whose policies' status is refreshed soon
        # Leadership gate (kube/leader.py): a standby keeps its cache current but never writes.
        self.is_leader: Callable[[], bool] = lambda: True

    def _fence(self) -> None:
        if not self.is_leader():
            raise NotLeader()

    async def take_over(self) -> None:
        """Just became leader: reconcile every known session and look for orphans the standby ignored."""
        for key in list(self.cache.sessions):
            self.pass_soon(key, "leader took over")
        # In the background: the elector awaits this, and renews the Lease only after it returns. With a
        # slow API server (1-4 s per request) a few dozen orphan candidates outlasted the renew deadline,
        # so every pass scheduled above was refused and the sessions waited for the next term.
        task = asyncio.create_task(self._collect_orphans())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _collect_orphans(self) -> None:
        for claim in list(self.cache.claims.values()):
            session = self.session_for_claim(claim)
            if session is None or session not in self.cache.sessions:
                with contextlib.suppress(Exception):  # the next claim event retries
                    await self.collect_orphan(dict(claim))

    def _event(self, obj: dict[str, Any], reason: str, message: str, type_: str = "Normal") -> None:
        """Post an Event in the background: a pass never waits for (or fails on) an Event."""
        task = asyncio.create_task(self.kube.event(obj, reason, message, type_))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ---- triggers ----------------------------------------------------------------------------
    def pass_soon(self, key: Key, cause: str, at: dt.datetime | None = None) -> None:
        """A pass over the cached body at `at` (now by default), for a trigger whose news is in the cache
        already (a policy, a pool, leadership, a provisioning step): no GET first, as a deadline's pass
        makes to act on the newest state. A policy change or a failover at 10,000 sessions made 10,000."""
        at = at or _now()
        self.scheduler.schedule(key, at)
        self._cached_due[key] = (at, cause)

    async def _on_deadline(self, key: Key, at: dt.datetime) -> None:
        cached = self._cached_due.pop(key, None)
        if cached is not None and cached[0] == at:
            await self.reconcile(key, cause=cached[1])
            return
        lag = (_now() - at).total_seconds()
        await self.reconcile(key, cause="deadline", deadline_lag=lag)

    def trigger_namespace(self, namespace: str, cause: str) -> None:
        """Reconcile every known session of a namespace soon (a policy or pool changed)."""
        now = _now()
        for key in self.cache.sessions_in(namespace):
            self.pass_soon(key, cause, now)

    def remember_session(self, key: Key, body: dict[str, Any]) -> None:
        """Cache the newest body of a session (every path goes through here) and see what its change moves."""
        before = self.cache.sessions.get(key)
        self.cache.remember_session(key, body)
        after = self.cache.sessions.get(key)
        if after is not before:
            self._session_changed(key[0], before, after)

    def _session_changed(self, namespace: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        """A session appeared, changed or went. maxSessionsPerLabel: when its place in a capped label group
        changed (created, relabelled, finished, deleted), the sessions ranked after it in that group are
        judged again now (decisions.quota.to_wake: a waiting one may proceed, a running one may be over).
        Policies' matchedSessions: refreshed soon when its labels changed. Both cost nothing in a namespace
        without policies, and neither scans the namespace unless a label or a place changed."""
        policies = self.cache.policies.get(namespace) or {}
        if not policies:
            return
        keys = quota.capped_keys(policies.values())
        if keys:
            now = _now()
            for woken in quota.to_wake(before, after, self.cache.scan_bodies_in(namespace), keys):
                due = self.scheduler.due(woken)
                if due is None or due > now:  # already due: a burst wakes each session once
                    self.pass_soon(woken, "its place in a capped group moved", now)

        def labels(body: dict[str, Any] | None) -> Any:
            return ((body or {}).get("metadata") or {}).get("labels") or {}

        if before is None or after is None or labels(before) != labels(after):
            self.policy_status_soon(namespace)

    def policy_status_soon(self, namespace: str) -> None:
        """Refresh the namespace's policies' status (matchedSessions) once a burst of session changes is over:
        one pass over the namespace per POLICY_STATUS_DEBOUNCE, not one per session event."""
        if namespace in self._policy_status_due:
            return
        try:
            task = asyncio.get_running_loop().create_task(self._policy_status_later(namespace))
        except RuntimeError:  # no loop (a synchronous caller): the next policy event writes it
            return
        self._policy_status_due.add(namespace)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _policy_status_later(self, namespace: str) -> None:
        await asyncio.sleep(POLICY_STATUS_DEBOUNCE)
        self._policy_status_due.discard(namespace)
        if not self.is_leader():
            return
        for name in list(self.cache.policies.get(namespace, {})):
            try:
                await self.update_policy_status(namespace, name)
            except Exception as exc:  # the next change or policy event writes it
                logger(namespace=namespace, policy=name).warning("policy status not written", error=str(exc)[:300])

    async def update_policy_status(self, namespace: str, name: str) -> None:
        """Valid, matchedSessions, observedGeneration of one policy (written when they change)."""
        body = self.cache.policies.get(namespace, {}).get(name)
        if body is None:
            return
        status = policy.policy_status(body, self.cache.bodies_in(namespace), _now())
        if patch_changes(body.get("status") or {}, status):
            await self.kube.patch_policy_status(namespace, name, status)

    def wake_forks(self, namespace: str, source: str) -> None:
        """A session changed: forks of it still without a claim are judged again now (it may be Ready)."""
        now = _now()
        for key in [k for k in self.cache.forks if k[0] == namespace]:
            body = self.cache.sessions[key]
            if fork.source_name(body) == source and not (body.get("status") or {}).get("claimName"):
                self.pass_soon(key, "its source changed", now)

    def session_for_claim(self, claim: dict[str, Any]) -> Key | None:
        for ref in claim["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == names.SESSION_KIND and ref.get("apiVersion", "").startswith(f"{names.GROUP}/"):
                return claim["metadata"]["namespace"], ref["name"]
        return None

    def session_for_network_policy(self, body: dict[str, Any]) -> Key | None:
        """The session a NetworkPolicy belongs to, by its controller reference (kind and group checked)."""
        for ref in body["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == names.SESSION_KIND and ref.get("apiVersion", "").startswith(f"{names.GROUP}/"):
                return body["metadata"]["namespace"], ref["name"]
        return None

    def session_for_sandbox(self, sandbox: dict[str, Any]) -> Key | None:
        namespace = sandbox["metadata"]["namespace"]
        for ref in sandbox["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == c.CLAIM_KIND:
                claim = self.cache.claims.get((namespace, ref["name"]))
                if claim is not None:
                    return self.session_for_claim(claim)
        return None

    async def collect_orphan(self, claim: dict[str, Any]) -> bool:
        """Delete a claim labelled as ours whose owner session (by UID) a live read shows is gone.

        Never by label alone: the owner is the AgentSession ownerReference (or, lacking one, the
        session-uid label), and the verdict comes from the API, not the cache. True when deleted.
        """
        meta = claim["metadata"]
        if meta.get("deletionTimestamp") or not self.is_leader():
            return False
        owner = next((r for r in meta.get("ownerReferences") or [] if r.get("kind") == names.SESSION_KIND), None)
        labels = meta.get("labels") or {}
        owner_uid = owner["uid"] if owner else labels.get(names.LABEL_SESSION_UID)
        owner_name = owner["name"] if owner else None
        if not owner_uid:
            return False  # nothing names an owner: not provably ours, leave it alone
        namespace = meta["namespace"]
        if owner_name is None:
            matches = [s for s in await self.kube.list_sessions(namespace) if s["metadata"]["uid"] == owner_uid]
            alive = bool(matches)
        else:
            session = await self.kube.get_session(namespace, owner_name)
            alive = session is not None and session["metadata"]["uid"] == owner_uid
        if alive or not self.is_leader():  # not leader (any more): the leader's own pass covers it
            return False
        if await self.kube.delete_claim(namespace, meta["name"], meta.get("uid")):
            metrics.CLAIMS_DELETED.labels(reason="Orphaned").inc()
            logger(namespace=namespace, claim=meta["name"]).info("orphan claim deleted", owner_uid=owner_uid)
        return True

    async def prime(self, namespaces: tuple[str, ...] = ()) -> None:
        """List every policy, warm pool, session, claim, Sandbox and NetworkPolicy once, in pages, before any
        session is acted on (see Cache.loaded).

        kopf runs startup handlers before its watches: without this, a session's first pass could run before
        the policies' and create a claim a policy forbids; maxSessionsPerLabel ranks a session among all of its
        group (judged before the older ones arrive, a waiting session got a claim for a moment). And a fresh
        replica (a restart, a failover) that learnt the children from kopf's listings, which run side by side,
        judged many sessions before their claim, Sandbox or NetworkPolicy arrived: a GET of each, a create
        of each NetworkPolicy answered 409, a GET of the session for each claim listed first (the orphan
        check). At 10,000 sessions that kept it busy for minutes. A failed list fails the start (and kopf
        retries it) rather than act without policies."""
        for body in await _patiently(self.kube.list_policies, None):
            meta = body["metadata"]
            if watched(meta.get("namespace"), namespaces):
                self.cache.policies[meta["namespace"]][meta["name"]] = dict(body)
        for body in await _patiently(self.kube.list_warm_pools):
            self.cache.remember_pool((body["metadata"]["namespace"], body["metadata"]["name"]), body)
        counts: dict[str, int] = {}
        for kind in PRIMED_KINDS:  # claims before Sandboxes: a Sandbox is cached by its claim's session
            counts[kind] = 0
            async for items in _pages(self.kube, kind):
                for body in items:
                    meta = body["metadata"]
                    if watched(meta.get("namespace"), namespaces):
                        counts[kind] += self._prime_one(kind, (meta["namespace"], meta["name"]), body)
        self.cache.loaded = True
        logger().info(
            "cache loaded", policies=sum(map(len, self.cache.policies.values())), pools=len(self.cache.pools), **counts
        )

    def _prime_one(self, kind: str, key: Key, body: dict[str, Any]) -> bool:
        if kind == "sessions":
            self.remember_session(key, body)
        elif kind == "claims":
            self.cache.remember_claim(key, body)
        elif kind == "network_policies":
            if self.session_for_network_policy(body) is None:
                return False
            self.cache.remember_network_policy(key, body)
        elif self.session_for_sandbox(body) is not None:
            self.cache.remember_sandbox(key, body)
        else:
            return False
        return True

    def unchanged(self, kind: str, key: Key, body: Mapping[str, Any]) -> bool:
        """The cache holds this child at this very version (prime() or an earlier event read it). A listed
        one (kopf's first listing, a relist) then needs no pass of its own: nothing changed, and the session's
        own listing runs one (at 10,000 sessions, 30,000 passes fewer at every start)."""
        table: Mapping[Key, Mapping[str, Any]] = {
            "claims": self.cache.claims,
            "sandboxes": self.cache.sandboxes,
            "network_policies": self.cache.network_policies,
        }[kind]
        return same_version(table.get(key), body)

    # ---- relists: deletions no watch delivered ------------------------------------------------
    def relisted(self, kind: str) -> None:
        """kopf delivered a listed object of `kind`: once the listing's burst is over, list again and
        drop what the cache holds but the API no longer has (a relist brings no DELETED events)."""
        self._listed_at[kind] = time.monotonic()
        if kind in self._resync_due:
            return
        self._resync_due.add(kind)
        task = asyncio.create_task(self._resync_soon(kind))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _resync_soon(self, kind: str) -> None:
        # RESYNC_DEBOUNCE after the listing's last event, not its first: a fresh replica's listing of
        # 3,000 sessions took 30 s to hand over, and it was listed again every 2 s meanwhile.
        while (quiet := time.monotonic() - self._listed_at[kind]) < RESYNC_DEBOUNCE:
            await asyncio.sleep(RESYNC_DEBOUNCE - quiet)
        self._resync_due.discard(kind)
        try:
            await self.resync(kind)
        except Exception as exc:  # the periodic resync tries again
            logger().warning("cache resync failed", kind=kind, error=str(exc)[:300])

    async def resync_forever(self, period: float = RESYNC_PERIOD) -> None:
        """Every `period`: a relist that found nothing of a kind (every policy deleted while the watch
        was down) delivers no event at all, so nothing else would notice."""
        while True:
            await asyncio.sleep(period)
            for kind in RESYNC_KINDS:
                try:
                    await self.resync(kind)
                except Exception as exc:
                    logger().warning("cache resync failed", kind=kind, error=str(exc)[:300])

    async def resync(self, kind: str) -> list[Key]:
        """List `kind` and drop the cached objects deleted unseen; what depended on them is judged again."""
        items, version = await self.kube.list_versioned(kind)
        listed = {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items}
        policies = {(ns, n): body for ns, bodies in self.cache.policies.items() for n, body in bodies.items()}
        tables: dict[str, Mapping[Key, Any]] = {
            "policies": policies,
            "pools": self.cache.pools,
            "sessions": self.cache.sessions,
            "claims": self.cache.claims,
            "sandboxes": self.cache.sandboxes,
        }
        gone = unseen_deletions(tables[kind], listed, version)
        for key in gone:
            metrics.CACHE_RESYNC_DROPPED.labels(kind=kind).inc()
            logger(namespace=key[0], name=key[1]).info("deleted while unwatched: dropped from the cache", kind=kind)
            if kind == "policies":
                self.cache.policies[key[0]].pop(key[1], None)
                self.trigger_namespace(key[0], cause=f"policy {key[1]} gone")
            elif kind == "pools":
                self.cache.pools.pop(key, None)
                self.trigger_namespace(key[0], cause=f"warm pool {key[1]} gone")
            elif kind == "sessions":
                self.session_deleted(key, (self.cache.sessions.get(key) or {}).get("metadata", {}).get("uid"))
            elif kind == "claims":
                claim = self.cache.claims.pop(key, None)
                owner = self.session_for_claim(claim) if claim else None
                if owner is not None and owner in self.cache.sessions:
                    self.scheduler.schedule(owner, _now())
            else:
                sandbox = self.cache.sandboxes.pop(key, None)
                owner = self.session_for_sandbox(sandbox) if sandbox else None
                if owner is not None and owner in self.cache.sessions:
                    self.scheduler.schedule(owner, _now())
        return gone

    # ---- observation -------------------------------------------------------------------------
    async def label_domains(self) -> list[str]:
        cached = self._label_domains
        if cached is None or time.monotonic() - cached[0] > LABEL_DOMAINS_TTL:
            domains = await self.kube.allowed_label_domains(
                self.config.agent_sandbox_namespace, self.config.agent_sandbox_configmap
            )
            cached = (time.monotonic(), domains)
            self._label_domains = cached
        return cached[1]

    def _effective(self, session: dict[str, Any]) -> policy.EffectivePolicy:
        namespace = session["metadata"]["namespace"]
        return policy.effective_policy_for(session, list(self.cache.policies.get(namespace, {}).values()))

    async def _observe_claim(self, namespace: str, name: str, session: dict[str, Any]) -> dict[str, Any] | None:
        claim = self.cache.claims.get((namespace, name))
        if claim is not None:
            return claim
        # A session whose status names no claim has never had one created by a pass that finished (a
        # pass creates the claim, then writes claimName): skip the GET, the one API round trip before a
        # new session's claim create. The cache remembers our own creates; a claim that exists anyway (a
        # crashed pass's, or someone else's) answers the create with 409, and from then on it is read.
        key = (namespace, session["metadata"]["name"])
        if not (session.get("status") or {}).get("claimName") and key not in self._create_refused:
            return None
        if _phase(session.get("status")) == Phase.EXPIRED:
            # Its claim was deleted when it expired: one that still exists would be in the cache (listed at
            # start, then watched), and its own event brings it here to be deleted. (A 404 per pass of
            # every reaped session: two per reaped session at each restart.)
            return None
        # The cache may lag our own create: ask the API before deciding a claim is missing.
        return await self.kube.get_claim(namespace, name)

    async def _observe_sandbox(self, namespace: str, claim: dict[str, Any] | None) -> dict[str, Any] | None:
        bound = (((claim or {}).get("status") or {}).get("sandbox") or {}).get("name")
        if not bound:
            return None
        sandbox = self.cache.sandboxes.get((namespace, bound))
        return sandbox if sandbox is not None else await self.kube.get_sandbox(namespace, bound)

    async def _fork_inputs(self, session: dict[str, Any]) -> decide.ForkInputs:
        """A fork's inputs: the source session, its claim, its Sandbox read live (the cache drops
        volumeClaimTemplates), the source's PVCs and their StorageClasses (decisions/fork.py plans)."""
        namespace = session["metadata"]["namespace"]
        name = fork.source_name(session) or ""
        source = self.cache.sessions.get((namespace, name)) or await self.kube.get_session(namespace, name)
        if source is None or (source.get("status") or {}).get("phase") not in fork.FORKABLE_PHASES:
            return decide.ForkInputs(source)
        claim_name = naming.claim_name(name, source["metadata"]["uid"])
        claim = self.cache.claims.get((namespace, claim_name)) or await self.kube.get_claim(namespace, claim_name)
        bound = (((claim or {}).get("status") or {}).get("sandbox") or {}).get("name")
        sandbox = await self.kube.get_sandbox(namespace, bound) if bound else None
        pvcs: dict[str, dict[str, Any] | None] = {}
        classes: dict[str, dict[str, Any] | None] = {}
        for pvc_name in fork.source_pvc_names(sandbox):
            pvcs[pvc_name] = await self.kube.get_pvc(namespace, pvc_name)
        for pvc in pvcs.values():
            class_name = ((pvc or {}).get("spec") or {}).get("storageClassName")
            if class_name and class_name not in classes:
                classes[class_name] = await self.kube.get_storage_class(class_name)
        return decide.ForkInputs(source, claim, sandbox, pvcs, classes)

    # ---- the pass ----------------------------------------------------------------------------
    async def reconcile(self, key: Key, cause: str, deadline_lag: float | None = None, fresh: bool = False) -> None:
        """One pass. `fresh` re-reads the session from the API first (deadlines act on the newest state);
        otherwise the newest body the watch or our own writes delivered is used."""
        if not self.is_leader():
            return  # take_over() reconciles every session when this replica becomes leader
        if not self.cache.loaded:
            # Never judge a session without its policies: try again once they are loaded.
            self.scheduler.schedule(key, _now() + dt.timedelta(seconds=1))
            return
        lock = self._locks[key]
        if lock.locked():
            # A pass is running: it will run once more for everything that arrived meanwhile.
            _, was_fresh = self._dirty.get(key, (cause, False))
            self._dirty[key] = (cause, was_fresh or fresh or deadline_lag is not None)
            return
        async with lock:
            await self._pass(key, cause, deadline_lag, fresh)
            while key in self._dirty:
                cause, fresh = self._dirty.pop(key)
                await self._pass(key, cause, None, fresh)

    async def _pass(self, key: Key, cause: str, deadline_lag: float | None, fresh: bool) -> None:
        started = time.monotonic()
        try:
            await self._reconcile(key, cause, deadline_lag, fresh or deadline_lag is not None)
            self._failures.pop(key, None)
        except NotLeader:
            logger(namespace=key[0], session=key[1]).info("not leader: pass abandoned before writing", cause=cause)
        except SessionGone:
            logger(namespace=key[0], session=key[1]).info("session deleted: pass abandoned", cause=cause)
        except Exception as exc:
            metrics.RECONCILE_ERRORS.labels(kind=type(exc).__name__).inc()
            failures = self._failures[key] = self._failures[key] + 1
            delay = min(MAX_RETRY_DELAY, 0.5 * 2**failures)
            logger(namespace=key[0], session=key[1]).warning(
                "reconcile failed; retrying", error=str(exc), cause=cause, retry_in=delay
            )
            self.scheduler.schedule(key, _now() + dt.timedelta(seconds=delay))
        finally:
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)

    async def _reconcile(self, key: Key, cause: str, deadline_lag: float | None, fresh: bool) -> None:
        seen = await self._observe(key, fresh)
        if seen is None:
            return
        decision = decide.decide(seen)
        if decision.missing_pool and await self.kube.get_warm_pool(key[0], decision.missing_pool) is not None:
            decision = decide.decide(replace(seen, pools={*seen.pools, decision.missing_pool}))
        await self._carry_out(key, decision, logger(namespace=key[0], session=key[1], cause=cause), deadline_lag)

    async def _observe(self, key: Key, fresh: bool) -> decide.Observed | None:
        """Everything a pass decides on: the cache first, the API where the cache may lag. None: the
        session is gone (forgotten here)."""
        namespace, name = key
        session = None if fresh else self.cache.sessions.get(key)
        if session is None:
            session = await self.kube.get_session(namespace, name)
        if session is None or self.cache.is_deleted(session):
            self.forget(key)
            return None
        self.remember_session(key, session)
        uid = session["metadata"]["uid"]
        claim_name = naming.claim_name(name, uid)
        claim = await self._observe_claim(namespace, claim_name, session)
        status = session.get("status") or {}
        if claim is None and status.get("claimName") and not fresh and _phase(status) != Phase.EXPIRED:
            # The claim the status names is gone. So may the session be: a stale event handled after its
            # deletion (the garbage collector took the claim) must not create the claim again. Not asked
            # of an Expired session: it stays Expired and never creates a claim.
            latest = await self.kube.get_session(namespace, name)
            if latest is None or latest["metadata"]["uid"] != uid:
                self.cache.session_deleted(uid)
                self.forget(key)
                if latest is not None:  # the same name, another session: its own pass
                    self.scheduler.schedule(key, _now())
                return None
        source = fork.source_name(session)
        fork_inputs = None
        fork_source = None
        if claim is None and source and not status.get("claimName"):
            fork_inputs = await self._fork_inputs(session)
        elif claim is not None and source:
            cached = self.cache.sessions.get((namespace, source))
            fork_source = dict(cached) if cached is not None else None
        return decide.Observed(
            session=session,
            claim=claim,
            sandbox=await self._observe_sandbox(namespace, claim),
            now=_now(),
            policies=list(self.cache.policies.get(namespace, {}).values()),
            pools={pool for ns, pool in self.cache.pools if ns == namespace},
            label_domains=await self.label_domains(),
            peers=self.cache.scan_bodies_in(namespace),
            fork_inputs=fork_inputs,
            fork_source=fork_source,
            network_policy=self.cache.network_policies.get((namespace, network.policy_name(claim_name))),
            network_settings=self.config.network,
            expiry_lead=self.config.expiry_warning,
            progress_written=self._progress_written.get(key),
        )

    async def _carry_out(self, key: Key, decision: decide.Decision, log: Any, deadline_lag: float | None) -> None:
        """Act on a decision, in its order: lineage, the actions, the status, retention."""
        session = decision.view
        if decision.lineage is not None:
            await self._write_status(key, session, {"lineage": decision.lineage}, log)
            log.info("fork lineage recorded", ancestors=[entry.get("name") for entry in decision.lineage])
        again = False
        created: dict[str, Any] | None = None
        for action in decision.actions:
            if isinstance(action, ScheduleCheck):
                self._schedule(key, action)
            elif isinstance(action, Warn):
                log.warning("warning", reason=action.reason, message=action.message)
                self._event(session, action.reason, action.message, "Warning")
            elif isinstance(action, CreateClaim | PatchClaim):
                try:
                    again = await self._act(action, session, decision.observed.claim, log, deadline_lag) or again
                except ApiException as exc:
                    if not refusals.is_refusal(exc.status):
                        raise
                    # Say why on the status before the pass fails (and is retried with backoff).
                    verb = "create" if isinstance(action, CreateClaim) else "patch"
                    patch = decide.refused(decision, verb, int(exc.status), refusals.api_message(exc.body))
                    await self._write_status(key, session, patch, log)
                    raise
                if isinstance(action, CreateClaim):
                    created = self.cache.claims.get((key[0], action.manifest["metadata"]["name"]))
            else:
                again = await self._act(action, session, decision.observed.claim, log, deadline_lag) or again
        if created is not None:
            decision = decide.after_create(decision, created)
            for step in decision.actions:
                if isinstance(step, ApplyNetworkPolicy):
                    await self._apply_network_policy(step, session, log)
                elif isinstance(step, ScheduleCheck):
                    self._schedule(key, step)
        if decision.status is not None:
            await self._write_status(key, session, decision.status, log)
            if decision.progress:  # a provisioning session's progress: the next waits longer (decisions.actions)
                self._progress_written[key] = decision.observed.now
            else:
                self._progress_written.pop(key, None)
        await self._retention(key, decision.retention)
        if again:  # last, so no deadline set by this pass replaces it
            self.scheduler.schedule(key, _now() + dt.timedelta(seconds=AGAIN_DELAY))

    def _schedule(self, key: Key, check: ScheduleCheck) -> None:
        if check.reason == PROGRESS_CHECK:
            # Only a provisioning session's deferred progress: one GET per slow session at 10,000.
            self.pass_soon(key, "provisioning progress", check.at)
        else:
            self.scheduler.schedule(key, check.at)

    async def _act(
        self,
        action: Action,
        session: dict[str, Any],
        claim: Mapping[str, Any] | None,
        log: Any,
        deadline_lag: float | None,
    ) -> bool:
        """Do one action; True when the session needs another pass soon."""
        namespace, name = session["metadata"]["namespace"], session["metadata"]["name"]
        self._fence()
        if isinstance(action, CreateClaim):
            if self.cache.is_deleted(session):
                # Its DELETED event was handled while this pass awaited the API (a pass started by a claim,
                # a deadline or a take-over, not by the session's own event): no claim for a dead session.
                raise SessionGone()
            created = await self.kube.create_claim(action.manifest)
            claim_name = action.manifest["metadata"]["name"]
            if created is None:
                self._create_refused.add((namespace, name))
                existing = await self.kube.get_claim(namespace, claim_name)
                if existing is None:
                    log.warning("the claim create met a 409 but no claim is there: creating again", claim=claim_name)
                elif is_owned_by(existing, session["metadata"]["uid"]):
                    self.cache.remember_claim((namespace, claim_name), existing)
                    log.info("claim exists already", claim=claim_name)
                else:
                    log.warning("a SandboxClaim of that name belongs to someone else", claim=claim_name)
                # Either way the next pass sees the claim (or its absence) and decides with it. Not scheduled
                # here: a ScheduleCheck later in this pass would replace it with a far deadline.
                return True
            self.cache.remember_claim((namespace, claim_name), created)
            metrics.CLAIMS_CREATED.inc()
            log.info("claim created", claim=claim_name)
            # No ClaimCreated Event: status.claimName and the ClaimCreated condition say it, and an Event
            # is one more POST to the API server per new session (see _write_status).
            source = fork.source_name(session)
            if source:
                copies = [
                    f"{v['metadata']['name']} (from PVC {v['spec']['dataSource']['name']})"
                    for v in action.manifest["spec"].get("volumeClaimTemplates") or []
                    if (v.get("spec") or {}).get("dataSource")
                ]
                self._event(session, "Forked", f"Fork of AgentSession {source}: volumes cloned: {', '.join(copies)}")
        elif isinstance(action, PatchClaim):
            await self.kube.patch_claim(namespace, action.name, action.patch)
            log.info("claim patched", claim=action.name, patch=action.patch)
            shutdown = ((action.patch.get("spec") or {}).get("lifecycle") or {}).get("shutdownTime")
            if shutdown:
                self._event(session, "ExpiryChanged", f"The session now expires at {shutdown} (ttl or policy changed)")
        elif isinstance(action, DeleteClaim):
            uid = (claim or {}).get("metadata", {}).get("uid")
            if await self.kube.delete_claim(namespace, action.name, uid):
                metrics.CLAIMS_DELETED.labels(reason=action.reason).inc()
                if deadline_lag is not None:
                    metrics.REAP_LAG.observe(max(deadline_lag, 0.0))
                log.info("claim deleted", claim=action.name, reason=action.reason)
                self._event(session, action.reason, f"Deleted SandboxClaim {action.name} ({action.reason})")
        elif isinstance(action, ApplyNetworkPolicy):
            await self._apply_network_policy(action, session, log)
        elif isinstance(action, PatchSandbox):
            await self.kube.patch_sandbox(namespace, action.name, action.patch)
            mode = (action.patch.get("spec") or {}).get("operatingMode", "")
            log.info("sandbox operating mode set", sandbox=action.name, mode=mode)
            if deadline_lag is not None and mode == c.OPERATING_MODE_SUSPENDED:
                metrics.REAP_LAG.observe(max(deadline_lag, 0.0))
            self._event(
                session,
                "Suspended" if mode == c.OPERATING_MODE_SUSPENDED else "Resumed",
                f"Sandbox {action.name} operatingMode set to {mode}",
            )
        return False

    async def _apply_network_policy(self, action: ApplyNetworkPolicy, session: dict[str, Any], log: Any) -> None:
        manifest = action.manifest
        namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        current = dict(action.current) if action.current is not None else None
        if current is None:
            written = await self.kube.create_network_policy(manifest)
            if written is None:  # the watch has not shown it yet: read it, and replace it only if ours
                current = await self.kube.get_network_policy(namespace, name)
        if current is not None:
            if not is_owned_by(current, session["metadata"]["uid"]):
                # Never overwritten. Cached (the watch sees only ours) so the retried pass reports NameConflict;
                # failing this one keeps it from writing NetworkIsolated=True.
                self.cache.remember_network_policy((namespace, name), current)
                raise RuntimeError(f"NetworkPolicy {namespace}/{name} exists and is not this session's")
            written = await self.kube.replace_network_policy(current, manifest)
        if written is not None:
            self.cache.remember_network_policy((namespace, name), written)
        log.info("network policy applied", network_policy=name, created=action.current is None)

    async def _write_status(self, key: Key, session: dict[str, Any], patch: dict[str, Any], log: Any) -> None:
        before = _phase(session.get("status"))
        patch = session_status.bounded_status(patch)
        self._fence()
        try:
            written = await self.kube.patch_session_status(key[0], key[1], patch)
        except ApiException as exc:
            if exc.status != 422:
                raise
            # Refused by the schema: never let that freeze the session. Write the phase and the idle
            # clock alone (what reaping reads), say so, and let the pass go on.
            log.warning("status refused by the API server; wrote the minimal status", error=str(exc.reason))
            self._event(session, "StatusRejected", f"status update refused: {str(exc.reason)[:512]}", "Warning")
            patch = session_status.minimal_status(patch)
            self._fence()
            written = await self.kube.patch_session_status(key[0], key[1], patch)
        if written is None:
            # 404: the session is gone. Remember it, so that no later trigger (the garbage collector
            # deleting the claim this pass created, a deadline) acts on the body this pass had.
            self.session_deleted(key, session["metadata"].get("uid"))
            raise SessionGone()
        self.remember_session(key, written)
        after = patch.get("phase", before)
        if after and after != self._phases.get(key):
            previous = self._phases.get(key)
            if previous:
                metrics.SESSIONS_BY_PHASE.labels(namespace=key[0], phase=previous).dec()
            metrics.SESSIONS_BY_PHASE.labels(namespace=key[0], phase=after).inc()
            self._phases[key] = after
        if after != before and after:
            ready: dict[str, Any] = next(
                (x for x in patch.get("conditions") or [] if x.get("type") == phases.COND_READY), {}
            )
            message = ready.get("message") or f"phase {after}"
            log.info("phase changed", old=before, new=after, reason=ready.get("reason"), message=message)
            warning = after in (Phase.FAILED,) or ready.get("reason") == phases.REASON_SANDBOX_UNAVAILABLE
            # Every new session passes through Provisioning: its Event was a POST per session on the API
            # server that creates the sessions (bench_scale), telling nothing the status does not. Ready,
            # Pending (a missing pool, a policy), the end phases and every Warning keep theirs.
            if warning or after != Phase.PROVISIONING:
                self._event(
                    session,
                    after if not ready.get("reason") else str(ready["reason"]),
                    message,
                    "Warning" if warning else "Normal",
                )
            if after == Phase.READY and patch.get("readyAt") and not (session.get("status") or {}).get("readyAt"):
                created = parse_time(session["metadata"].get("creationTimestamp"))
                ready_at = parse_time(patch["readyAt"])
                if created and ready_at:
                    metrics.TIME_TO_READY.observe(max((ready_at - created).total_seconds(), 0.0))

    async def _retention(self, key: Key, step: decide.DeleteSession | ScheduleCheck | None) -> None:
        """cleanup.deleteFinishedAfter: delete a finished session once its time has come."""
        if isinstance(step, decide.DeleteSession):
            self._fence()
            await self.kube.delete_session(key[0], key[1], step.uid)
            logger(namespace=key[0], session=key[1]).info(
                "finished session deleted by retention", after=str(step.after)
            )
        elif step is not None:
            self.scheduler.schedule(key, step.at)

    def session_deleted(self, key: Key, uid: str | None) -> None:
        """The session (this UID) is deleted: forget it, and never act on a body of it again."""
        cached_uid = (self.cache.sessions.get(key) or {}).get("metadata", {}).get("uid")
        self.cache.session_deleted(uid)
        if not uid or not cached_uid or cached_uid == uid:  # not a newer session of the same name
            self.forget(key)

    def forget(self, key: Key) -> None:
        body = self.cache.sessions.get(key)
        self.cache.forget_session(key)
        self.scheduler.cancel(key)
        self._locks.pop(key, None)
        self._create_refused.discard(key)
        self._cached_due.pop(key, None)
        self._progress_written.pop(key, None)
        phase = self._phases.pop(key, None)
        if phase:
            metrics.SESSIONS_BY_PHASE.labels(namespace=key[0], phase=phase).dec()
        if body is not None:  # a slot may have freed; matchedSessions changed
            self._session_changed(key[0], body, None)


PRIME_PATIENCE = 60.0
"""How long the start-up listing waits out an API server that is not ready to serve it (seconds)."""


async def _pages(kube: Kube, kind: str) -> AsyncIterator[list[dict[str, Any]]]:
    """The pages of a start-up listing, each page's request retried as _patiently does."""
    token: str | None = None
    while True:
        items, _, token = await _patiently(kube.list_page, kind, token)
        yield items
        if not token:
            return


async def _patiently(call: Callable[..., Awaitable[T]], *args: Any) -> T:
    """A start-up list (or a page of one), waiting out 429 and 5xx with the server's Retry-After (bounded):
    right after a CRD is created its storage answers 429 "storage is (re)initializing", and failing the
    startup handler would make kopf retry it only a minute later, with the operator unhealthy meanwhile."""
    deadline = time.monotonic() + PRIME_PATIENCE
    while True:
        try:
            return await call(*args)
        except ApiException as exc:
            if not (exc.status == 429 or (exc.status or 0) >= 500) or time.monotonic() >= deadline:
                raise
            retry_after = str((getattr(exc, "headers", None) or {}).get("Retry-After") or "")
            delay = float(retry_after) if retry_after.isdigit() else 1.0
            await asyncio.sleep(min(max(delay, 0.2), 5.0))
