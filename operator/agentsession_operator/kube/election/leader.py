"""Leader election on a coordination.k8s.io Lease: the I/O around kube/election/lease.py (the pure rules).

Every replica runs kopf standalone (no peering: it freezes equal-priority replicas) and keeps its watch
caches warm; only the replica for which :meth:`LeaderElector.is_leader` is true reconciles. The check
is a pure function of the monotonic clock and the last successful renewal, so a replica whose renewals
stall (API down, event loop starved, network cut) stops acting by itself before a standby may take over.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import agentsession_operator.kube.election.lease as rules
from agentsession_operator.infra import metrics
from agentsession_operator.infra.logs import logger
from agentsession_operator.kube import transport
from agentsession_operator.kube.api import USER_AGENT, ApiClient, ApiException, Credentials, load_credentials
from agentsession_operator.kube.client import resource_path
from agentsession_operator.kube.election.hold import IN_FLIGHT, Hold
from agentsession_operator.kube.election.layout_guard import LEASE_OF_LABEL, LayoutGuard

_log = logger()
LEASE_USER_AGENT = "leader-election"  # tells the lease client's requests from the reconciler's
_GROUP, _VERSION, _PLURAL = "coordination.k8s.io", "v1", "leases"


class _Unread:
    """try_once's default: the Lease is read first."""


UNREAD = _Unread()


class Conflict(Exception):
    """Someone else wrote the Lease first (HTTP 409): re-read and decide again."""


class LeaseAPI(Protocol):
    async def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    async def list(self, namespace: str, selector: str) -> list[dict[str, Any]]: ...
    async def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...
    async def replace(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]: ...


class KubeLeaseAPI:
    """LeaseAPI over the operator's API client (plain dicts in and out; 409 as Conflict)."""

    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client
        self.gate: transport.Gate | None = None  # its own Retry-After gate (connect)

    @classmethod
    def connect(cls, timeout: float, credentials: Credentials | None = None) -> KubeLeaseAPI:
        """A client of its own: its own connections, its own Retry-After gate and a timeout under the renew
        deadline. Sharing the operator's client, a 429 on any reconcile request held the renewals back for
        Retry-After, and a stalled request for 30 s: either cost the leader its Lease."""
        api_client = ApiClient(credentials or load_credentials(), f"{USER_AGENT} {LEASE_USER_AGENT}")
        lease_api = cls(api_client)
        lease_api.gate = transport.install(api_client, transport.Gate(), timeout=timeout)
        return lease_api

    async def close(self) -> None:
        await self.api_client.close()

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(await self.api_client.call("GET", resource_path(_GROUP, _VERSION, _PLURAL, namespace, name)))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def list(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        path = resource_path(_GROUP, _VERSION, _PLURAL, namespace)
        listed = await self.api_client.call("GET", path, query=[("labelSelector", selector)])
        return [dict(item) for item in listed.get("items") or []]

    async def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return dict(
                await self.api_client.call("POST", resource_path(_GROUP, _VERSION, _PLURAL, namespace), body=body)
            )
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(str(exc.reason)) from exc
            raise

    async def replace(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            path = resource_path(_GROUP, _VERSION, _PLURAL, namespace, name)
            return dict(await self.api_client.call("PUT", path, body=body))
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(str(exc.reason)) from exc
            raise


def default_identity() -> str:
    """Unique per process: the pod name (hostname) plus a random suffix, so a restarted pod is a new holder."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class LeaderElector:
    def __init__(
        self,
        api: LeaseAPI,
        namespace: str,
        name: str,
        identity: str,
        timing: rules.Timing | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = utcnow,
        on_started_leading: Callable[[], Awaitable[None] | None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        annotations: dict[str, str] | None = None,
        base: str | None = None,
        guard: LayoutGuard | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timing = timing or rules.Timing()
        self._clock = clock
        self._wall = wall
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self.annotations = annotations  # written on the Lease with every write (a shard's layout)
        self.labels = {LEASE_OF_LABEL: base or name}  # one list finds every Lease of the operator (layout_guard)
        self.guard = guard  # run() takes nothing while a Lease of another layout is held (the single Lease's)
        self._renewed_at: float | None = None  # monotonic time at which our last successful write was *sent*
        self._seen: tuple[tuple[Any, ...], float] | None = None  # (the record's fingerprint, when first seen)
        self._record: rules.Record | None = None
        self._was_leader = False
        self._lapsed = False  # our hold ran out, unobserved, before a renewal restored it
        self._task: asyncio.Task[None] | None = None
        self.transitions = 0  # how often this replica became leader

    def is_leader(self) -> bool:
        return rules.holds(self._renewed_at, self._clock(), self.timing)

    def hold(self) -> Hold | None:
        """This Lease's hold for a write (kube/election/hold.py), None while not leader."""
        if self._renewed_at is None or not self.is_leader():
            return None
        term = self._record.transitions if self._record is not None else 0
        return Hold(self.name, self._renewed_at + self.timing.renew_deadline, term)

    def live_holder(self) -> str | None:
        """Who holds the Lease as of the last round: this replica while it leads, else the holder whose
        record changed less than its lease_duration ago (by our clock); None when free or expired."""
        if self.is_leader():
            return self.identity
        record, seen = self._record, self._seen
        if record is None or not record.holder or seen is None or seen[0] != record.fingerprint():
            return None
        return record.holder if self._clock() - seen[1] < record.lease_duration else None

    async def try_once(self, lease: dict[str, Any] | _Unread | None = UNREAD, take: bool = True) -> bool:
        """One round: read the Lease (unless `lease` is what was just read), then create, take or renew it
        when the rules allow; with `take` False, only renew (watch a Lease free or expired). True when leader."""
        sent = self._clock()
        if isinstance(lease, _Unread):
            lease = await self.api.get(self.namespace, self.name)
        record = rules.record_from(lease) if lease is not None else None
        now = self._clock()
        fingerprint = record.fingerprint() if record is not None else (None, None, None)
        if self._seen is None or self._seen[0] != fingerprint:
            self._seen = (fingerprint, now)
        step = rules.next_step(record, self.identity, now - self._seen[1])
        if step is rules.Step.WAIT or (not take and step is not rules.Step.RENEW):
            self._record = record
            if record is not None and record.holder != self.identity:
                self._renewed_at = None  # someone else holds it: never act on an old renewal
            return False
        spec = rules.spec_for(step, record, self.identity, self.timing, self._wall())
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }
        body["metadata"]["labels"] = dict(self.labels)
        if self.annotations:
            body["metadata"]["annotations"] = dict(self.annotations)
        try:
            if step is rules.Step.CREATE:
                written = await self.api.create(self.namespace, body)
            else:
                assert record is not None
                body["metadata"]["resourceVersion"] = record.resource_version
                written = await self.api.replace(self.namespace, self.name, body)
        except Conflict:
            return self.is_leader()  # lost a race (or our renewal raced a take-over): decide next round
        if not self.is_leader():
            # The renew deadline passed during this round (a slow or throttled API): passes were refused
            # meanwhile and nothing retries them, though _notify may see leader -> leader. Count it as
            # becoming leader again, so on_started_leading reconciles everything once more.
            self._lapsed = True
        self._renewed_at = sent
        self._record = rules.record_from(written)
        self._seen = (self._record.fingerprint(), self._clock())
        if step is not rules.Step.RENEW:
            _log.info("leader lease acquired", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        return True

    async def notify(self) -> None:
        """Run the callbacks of a change of leadership since the last call (ShardElector's rounds call it)."""
        await self._notify()

    async def _notify(self) -> None:
        leader = self.is_leader()
        if leader and (not self._was_leader or self._lapsed):
            self._lapsed = False
            self.transitions += 1
            if self._on_started is not None:
                result = self._on_started()
                if result is not None:
                    await result
        elif self._was_leader and not leader:
            _log.warning("leadership lost: reconciling stops", identity=self.identity, lease=self.name)
            if self._on_stopped is not None:
                self._on_stopped()
        self._was_leader = leader

    async def round(self) -> None:
        """One round of the single Lease: nothing is taken (and a hold is let go) while the guard sees a Lease
        of another layout held; else try_once."""
        if self.guard is None:
            await self.try_once()
            return
        blocked, lease = await asyncio.gather(self.guard.blocked(), self.api.get(self.namespace, self.name))
        if not blocked:
            await self.try_once(lease)
        elif self.is_leader():
            await self.release()
        else:
            await self.try_once(lease, take=False)  # still watched: an expired Lease is taken once unblocked

    async def run(self) -> None:
        while True:
            started = self._clock()
            try:
                # Bounded: a stalled request must not outlive the hold (see Timing.round_timeout).
                await asyncio.wait_for(self.round(), self.timing.round_timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the API is down or slow: keep trying; is_leader() expires by itself
                error = str(exc) or type(exc).__name__
                _log.warning("leader lease round failed", error=error, leader=self.is_leader())
            await self._notify()
            # Every retry_period from the start of the last round; at once after a round that overran it.
            await asyncio.sleep(max(0.0, started + self.timing.retry_period - self._clock()))

    def start(self) -> None:
        metrics.report_leadership(self.is_leader)  # agentsession_leader: the alert on "no replica leads"
        self._task = asyncio.create_task(self.run(), name="leader-election")

    async def stop(self) -> None:
        """Stop campaigning and release the Lease when we hold it (a graceful shutdown)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.guard is not None:
            await self.guard.close()
        await self.release()

    async def release(self) -> None:
        held = self.hold()
        self._renewed_at = None  # stop acting first (no write is sent from now), then drain, then let go
        if held is None:
            return
        # A standby takes a released Lease at once, so it must find none of our writes still landing. The wait
        # is short (a round's renewals of other shards run beside it); writes still under way after it keep the
        # Lease unreleased: it expires by itself, lease_duration after our last renewal, past their deadlines.
        wait = min(max(0.0, held.until - self._clock()), self.timing.round_timeout / 2)
        if not await IN_FLIGHT.drain(self.name, wait):
            _log.warning("writes still under way: the Lease is left to expire", lease=self.name)
            return
        try:
            await asyncio.wait_for(self._release(), self.timing.round_timeout)
        except Exception as exc:  # the standby then takes over after lease_duration instead
            _log.warning("leader lease not released", error=str(exc) or type(exc).__name__)

    async def _release(self) -> None:
        lease = await self.api.get(self.namespace, self.name)
        if lease is None:
            return
        record = rules.record_from(lease)
        if record.holder != self.identity:
            return
        metadata: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "resourceVersion": record.resource_version,
        }
        metadata["labels"] = dict(self.labels)
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": rules.released_spec(record, self._wall()),
        }
        await self.api.replace(self.namespace, self.name, body)
        _log.info("leader lease released", identity=self.identity)
