"""The places held under cleanup.maxSessionsPerNamespace, kept sorted per namespace as sessions come and go,
so a pass counts the places ahead of it by bisection (decisions.quota.over_namespace_cap) instead of
judging every session of its namespace; and the creates admission let through that the watch has not
delivered yet, so a burst of creates is counted whole."""

from __future__ import annotations

import bisect
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agentsession_operator.decisions.quota import Rank, holds_place, rank

Key = tuple[str, str]  # (namespace, name)
ADMITTED_FOR = 60.0  # seconds an admitted create counts before the watch must have delivered it


class Places:
    """Per namespace, the sorted ranks of the cached sessions that hold a place (decisions.quota)."""

    def __init__(self) -> None:
        self._held: dict[Key, Rank] = {}
        self._sorted: dict[str, list[Rank]] = {}

    def update(self, key: Key, body: Mapping[str, Any] | None) -> Rank | None:
        """The session's newest body (None: forgotten). Returns the rank of a place it gave up, if any."""
        had = self._held.get(key)
        now = rank(body) if body is not None and holds_place(body) else None
        if had == now:
            return None
        ranks = self._sorted.setdefault(key[0], [])
        if had is not None:
            del self._held[key]
            index = bisect.bisect_left(ranks, had)
            if index < len(ranks) and ranks[index] == had:
                del ranks[index]
        if now is not None:
            self._held[key] = now
            bisect.insort(ranks, now)
        if not ranks:
            del self._sorted[key[0]]
        return had if now is None else None

    def in_namespace(self, namespace: str) -> Sequence[Rank]:
        """The namespace's places in rank order (a live view: do not write through it)."""
        return self._sorted.get(namespace) or ()


class Admitted:
    """Creates this replica's webhook admitted, until the cache has them (or ADMITTED_FOR passed)."""

    def __init__(self) -> None:
        self._at: dict[Key, float] = {}

    def add(self, key: Key) -> None:
        self._at[key] = time.monotonic()

    def pending(self, namespace: str, cached: Mapping[Key, Any]) -> list[str]:
        """Names admitted in `namespace` and not yet cached; forgets the cached and the stale."""
        cutoff = time.monotonic() - ADMITTED_FOR
        for key in [k for k, at in self._at.items() if at < cutoff or k in cached]:
            del self._at[key]
        return [name for ns, name in self._at if ns == namespace]
