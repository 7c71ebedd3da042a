"""The cache's start and upkeep: priming (one paged listing of every kind before any session is acted on)
and resync (listing again after a relist's burst, and every RESYNC_PERIOD, to drop what was deleted
while no watch saw it)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

from agentsession_operator.decisions.selectors import listed_namespaces, watched
from agentsession_operator.infra import metrics
from agentsession_operator.infra.logs import logger
from agentsession_operator.kube.api import ApiException
from agentsession_operator.kube.background import Background
from agentsession_operator.kube.cache import Cache, Key, same_version, unseen_deletions
from agentsession_operator.kube.client import LISTED_RESOURCES, Kube
from agentsession_operator.kube.owners import session_for_claim, session_for_network_policy, session_for_sandbox
from agentsession_operator.kube.primed_watch import PrimedVersions

RESYNC_DEBOUNCE = 2.0  # seconds after a listing's last event before listing again (the burst is over)
RESYNC_PERIOD = 300.0  # a relist that found nothing delivers no event at all: list anyway, this often
RESYNC_KINDS = ("policies", "pools", "templates", "sessions", "claims", "sandboxes")
PRIMED_KINDS = ("claims", "sandboxes", "network_policies", "sessions")
KIND_RESOURCES = {kind: LISTED_RESOURCES[kind] for kind in PRIMED_KINDS}  # (group, version, plural)
PRIME_PATIENCE = 60.0
"""How long the start-up listing waits out an API server that is not ready to serve it (seconds)."""
T = TypeVar("T")


class Sessions(Protocol):
    """What a listing tells the reconciler (kube/reconciler.py)."""

    def remember_session(self, key: Key, body: dict[str, Any]) -> None: ...
    def session_deleted(self, key: Key, uid: str | None) -> None: ...
    def trigger_namespace(self, namespace: str, cause: str) -> None: ...
    def pass_now(self, key: Key) -> None: ...


async def prime(
    kube: Kube,
    cache: Cache,
    sessions: Sessions,
    namespaces: tuple[str, ...] = (),
    versions: PrimedVersions | None = None,
    kinds: tuple[str, ...] = PRIMED_KINDS,
    timings: dict[str, float] | None = None,
) -> None:
    """List every policy, warm pool, session, claim, Sandbox and NetworkPolicy once, in pages, before any
    session is acted on (see Cache.loaded).

    kopf runs startup handlers before its watches: without this, a session's first pass could run before
    the policies' and create a claim a policy forbids; maxSessionsPerLabel ranks a session among all of its
    group. And a fresh replica (a restart, a failover) that learnt the children from kopf's listings, which
    run side by side, judged many sessions before their claim, Sandbox or NetworkPolicy arrived: a GET of
    each, a NetworkPolicy create answered 409, a GET of the session for each claim listed first. A failed
    list fails the start (and kopf retries it) rather than act without policies. `versions` gets each
    listing's resourceVersion: kopf's own first listing of these kinds watches from it (kube/primed_watch.py).
    `timings` gets each kind's listing time in seconds (kube/takeover.py tells them). Given --namespace
    names (no patterns), each kind is listed in those namespaces alone, never cluster-wide."""
    spent = timings if timings is not None else {}
    where: tuple[str | None, ...] = listed_namespaces(namespaces) or (None,)
    started = time.monotonic()
    for namespace in where:
        for body in await _patiently(kube.list_policies, namespace):
            meta = body["metadata"]
            if watched(meta.get("namespace"), namespaces):
                cache.policies[meta["namespace"]][meta["name"]] = dict(body)
    spent["policies"], started = time.monotonic() - started, time.monotonic()
    for namespace in where:
        for body in await _patiently(kube.list_warm_pools, namespace):
            cache.remember_pool((body["metadata"]["namespace"], body["metadata"]["name"]), body)
    spent["warm_pools"], started = time.monotonic() - started, time.monotonic()
    for namespace in where:
        for body in await _patiently(kube.list_templates, namespace):
            cache.remember_template((body["metadata"]["namespace"], body["metadata"]["name"]), body)
    spent["templates"] = time.monotonic() - started
    counts = await prime_children(
        kube, cache, sessions, lambda namespace: watched(namespace, namespaces), kinds, versions, spent, where
    )
    cache.loaded = True
    logger().info("cache loaded", policies=sum(map(len, cache.policies.values())), pools=len(cache.pools), **counts)


async def prime_children(
    kube: Kube,
    cache: Cache,
    sessions: Sessions,
    keep: Callable[[str], bool],
    kinds: tuple[str, ...] = PRIMED_KINDS,
    versions: PrimedVersions | None = None,
    timings: dict[str, float] | None = None,
    where: tuple[str | None, ...] = (None,),
) -> dict[str, int]:
    """List sessions and their children in pages (cluster-wide, or in each of `where`'s namespaces), caching
    those of the namespaces `keep` accepts (every watched one at start; a shard's when it is taken over).
    The counts cached, by kind."""
    counts: dict[str, int] = {}
    for kind in kinds:  # claims before Sandboxes: a Sandbox is cached by its claim's session
        counts[kind] = 0
        started = time.monotonic()
        for namespace in where:
            async for items, version in _pages(kube, kind, namespace):
                if versions is not None:
                    versions.primed(KIND_RESOURCES[kind], version, namespace)
                for body in items:
                    meta = body["metadata"]
                    if meta.get("namespace") and keep(meta["namespace"]):
                        counts[kind] += _prime_one(cache, sessions, kind, (meta["namespace"], meta["name"]), body)
        if timings is not None:
            timings[kind] = time.monotonic() - started
    return counts


def _prime_one(cache: Cache, sessions: Sessions, kind: str, key: Key, body: dict[str, Any]) -> bool:
    if kind == "sessions":
        sessions.remember_session(key, body)
    elif kind == "claims":
        cache.remember_claim(key, body)
    elif kind == "network_policies":
        if session_for_network_policy(body) is None:
            return False
        cache.remember_network_policy(key, body)
    elif session_for_sandbox(cache.claims, body) is not None:
        cache.remember_sandbox(key, body)
    else:
        return False
    return True


def unchanged(cache: Cache, kind: str, key: Key, body: Mapping[str, Any]) -> bool:
    """The cache holds this child at this very version (prime() or an earlier event read it). A listed one
    (kopf's first listing, a relist) then needs no pass of its own: nothing changed, and the session's own
    listing runs one."""
    table: Mapping[Key, Mapping[str, Any]] = {
        "claims": cache.claims,
        "sandboxes": cache.sandboxes,
        "network_policies": cache.network_policies,
    }[kind]
    return same_version(table.get(key), body)


async def _pages(
    kube: Kube, kind: str, namespace: str | None = None
) -> AsyncIterator[tuple[list[dict[str, Any]], str]]:
    """The pages of a start-up listing (cluster-wide, or of `namespace`) with the listing's resourceVersion
    (the same on every page), each page's request retried as _patiently does."""
    token: str | None = None
    while True:
        items, version, token = await _patiently(functools.partial(kube.list_page, namespace=namespace), kind, token)
        yield items, version
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


class Resync:
    """Deletions no watch delivered: a relist brings no DELETED events, so list once more and compare."""

    def __init__(self, kube: Kube, cache: Cache, sessions: Sessions, background: Background) -> None:
        self.kube = kube
        self.cache = cache
        self.sessions = sessions
        self.background = background
        self.due: set[str] = set()  # kinds whose listing-driven resync is pending
        self.listed_at: dict[str, float] = {}  # when kopf last delivered a listed object, per kind

    def relisted(self, kind: str) -> None:
        """kopf delivered a listed object of `kind`: once the listing's burst is over, list again and
        drop what the cache holds but the API no longer has."""
        self.listed_at[kind] = time.monotonic()
        if kind in self.due:
            return
        self.due.add(kind)
        self.background.spawn(self._soon(kind))

    async def _soon(self, kind: str) -> None:
        # RESYNC_DEBOUNCE after the listing's last event, not its first: a long listing hands its objects
        # over for many seconds, and it was listed again every RESYNC_DEBOUNCE meanwhile.
        while (quiet := time.monotonic() - self.listed_at[kind]) < RESYNC_DEBOUNCE:
            await asyncio.sleep(RESYNC_DEBOUNCE - quiet)
        self.due.discard(kind)
        try:
            await self.resync(kind)
        except Exception as exc:  # the periodic resync tries again
            logger().warning("cache resync failed", kind=kind, error=str(exc)[:300])

    async def forever(self, period: float = RESYNC_PERIOD, after: Callable[[], Awaitable[None]] | None = None) -> None:
        """Every `period`: a relist that found nothing of a kind (every policy deleted while the watch was
        down) delivers no event at all, so nothing else would notice. `after`: more upkeep of that period
        (the checkpoint sweep), awaited after the listings."""
        while True:
            await asyncio.sleep(period)
            for kind in RESYNC_KINDS:
                try:
                    await self.resync(kind)
                except Exception as exc:
                    logger().warning("cache resync failed", kind=kind, error=str(exc)[:300])
            if after is not None:
                await after()

    async def resync(self, kind: str) -> list[Key]:
        """List `kind` and drop the cached objects deleted unseen; what depended on them is judged again."""
        cache = self.cache
        items, version = await self.kube.list_versioned(kind)
        listed = {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items}
        policies = {(ns, n): body for ns, bodies in cache.policies.items() for n, body in bodies.items()}
        tables: dict[str, Mapping[Key, Any]] = {
            "policies": policies,
            "pools": cache.pools,
            "templates": cache.templates,
            "sessions": cache.sessions,
            "claims": cache.claims,
            "sandboxes": cache.sandboxes,
        }
        gone = unseen_deletions(tables[kind], listed, version)
        for key in gone:
            metrics.CACHE_RESYNC_DROPPED.labels(kind=kind).inc()
            logger(namespace=key[0], name=key[1]).info("deleted while unwatched: dropped from the cache", kind=kind)
            self._drop(kind, key)
        return gone

    def _drop(self, kind: str, key: Key) -> None:
        cache = self.cache
        owner: Key | None = None
        if kind == "policies":
            cache.policies[key[0]].pop(key[1], None)
            self.sessions.trigger_namespace(key[0], cause=f"policy {key[1]} gone")
        elif kind == "pools":
            cache.forget_pool(key)
            self.sessions.trigger_namespace(key[0], cause=f"warm pool {key[1]} gone")
        elif kind == "templates":
            cache.templates.pop(key, None)
            self.sessions.trigger_namespace(key[0], cause=f"template {key[1]} gone")
        elif kind == "sessions":
            self.sessions.session_deleted(key, (cache.sessions.get(key) or {}).get("metadata", {}).get("uid"))
        elif kind == "claims":
            claim = cache.claims.pop(key, None)
            owner = session_for_claim(claim) if claim else None
        else:
            sandbox = cache.sandboxes.pop(key, None)
            owner = session_for_sandbox(cache.claims, sandbox) if sandbox else None
        if owner is not None and owner in cache.sessions:
            self.sessions.pass_now(owner)
