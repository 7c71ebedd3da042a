"""No two layouts lead at once (issue 54 item 1): every Lease of the operator, read in one labelled list.

A replica with `--shards 4` and one with `--shards 2` (a change of the flag rolling out), or a default
replica beside sharded ones, map namespaces to Leases differently: each acting on what it holds, two would
lead some sessions. Reading only the Leases of its own layout, a replica missed the others' (`--shards 2`
never names shard 3). Every Lease an elector writes carries `LEASE_OF_LABEL` (its election's base name), so
one list finds all of them, whatever layout wrote them; a live one held by another replica under another
layout blocks taking anything (the layout is the shard count a Lease was written under, 1 for the single
Lease). Liveness is judged as the electors judge it (kube/election/lease.py): a record unchanged for its
lease_duration, by this replica's own clock, is expired.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

import agentsession_operator.kube.election.lease as rules
from agentsession_api.names import GROUP
from agentsession_operator.infra.logs import logger

LEASE_OF_LABEL: Final = f"{GROUP}/lease-of"
"""On every Lease an elector writes: the election's base name (`--leader-election-name`)."""
LAYOUT_ANNOTATION: Final = f"{GROUP}/shards"
"""On every shard and slot Lease: the shard count it was written under (none: the single Lease, layout 1)."""

_log = logger()


class LeaseLister(Protocol):
    async def list(self, namespace: str, selector: str) -> list[dict[str, Any]]: ...


def layout_of(lease: dict[str, Any]) -> str:
    return str(((lease.get("metadata") or {}).get("annotations") or {}).get(LAYOUT_ANNOTATION) or "1")


class LayoutGuard:
    def __init__(
        self,
        api: LeaseLister,
        namespace: str,
        base: str,
        identity: str,
        layout: int,
        timing: rules.Timing | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.selector = f"{LEASE_OF_LABEL}={base}"
        self.identity = identity
        self.layout = str(layout)
        self.timing = timing or rules.Timing()
        self._clock = clock
        self._seen: dict[str, tuple[tuple[Any, ...], float]] = {}  # name -> (fingerprint, first seen)
        self._blocked_by: list[str] = []
        self._listed = False  # a list has answered at least once
        self._listing: asyncio.Task[None] | None = None

    async def blocked(self) -> bool:
        """Whether a live Lease of another layout, held by another replica, was there at the last list. Each
        call starts the next list in the background (one at a time) and answers at once from the last one, so
        a round's renewal never waits on it (under a slow or faulty API server, an extra request in the round
        cost rounds their deadline, and the leader its Lease); only the first call waits for the first list,
        at most half a retry period. A list that fails keeps the last verdict (the guard is against a layout
        change rolling out, which lasts far longer than a round)."""
        if self._listing is None or self._listing.done():
            self._listing = asyncio.create_task(self._list(), name="lease-layout-guard")
        if not self._listed:
            await asyncio.wait({self._listing}, timeout=self.timing.retry_period / 2)
        return bool(self._blocked_by)

    async def _list(self) -> None:
        try:
            leases = await asyncio.wait_for(self.api.list(self.namespace, self.selector), self.timing.round_timeout)
        except Exception as exc:  # the API's own errors, a timeout: judged again at the next call
            _log.info("Lease list failed; the last verdict stands", error=str(exc)[:200] or type(exc).__name__)
            return
        self._listed = True
        self.foreign(leases)

    async def close(self) -> None:
        if self._listing is not None and not self._listing.done():
            self._listing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listing

    def foreign(self, leases: list[dict[str, Any]]) -> list[str]:
        """The live Leases of another layout held by another replica, by name."""
        now = self._clock()
        found = []
        names = set()
        for lease in leases:
            name = str((lease.get("metadata") or {}).get("name"))
            names.add(name)
            record = rules.record_from(lease)
            seen = self._seen.get(name)
            if seen is None or seen[0] != record.fingerprint():
                seen = self._seen[name] = (record.fingerprint(), now)
            live = bool(record.holder) and now - seen[1] < record.lease_duration
            if live and record.holder != self.identity and layout_of(lease) != self.layout:
                found.append(name)
        for gone in set(self._seen) - names:
            del self._seen[gone]
        if found and found != self._blocked_by:
            _log.error("a Lease of another layout is held: nothing is taken", leases=found, layout=self.layout)
        self._blocked_by = found
        return found
