"""Whether a warm pool the cache lacks exists after all: one GET per pool, shared by every pass waiting on it.

A session naming a pool the cache does not hold may be ahead of the pool's own watch event (both just
created): its pass asks the API. At a take-over every session waiting on a missing pool is passed at once, and
each pass used to GET the pool: 10,000 waiting sessions, 10,000 GETs of one pool (issue 53 item 3). Now the
passes of one pool share one request, and a pool found missing is not asked again for `window` seconds: its
creation reaches the cache by the watch (kube/watch_events.warm_pool moves its namespace's sessions), which is
what the cache is for; the window only bounds how long a lost event could be believed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

Key = tuple[str, str]

WINDOW = 30.0
"""Seconds a pool found missing is believed missing without asking again."""
KEPT = 4096
"""Pools remembered as missing at most (a tenant's sessions may name any number of absent pools)."""


class MissingPools:
    def __init__(
        self,
        exists: Callable[[str, str], Awaitable[bool]],
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._exists = exists
        self.window = window
        self._clock = clock
        self._missing: dict[Key, float] = {}  # pool -> when it was found missing
        self._asking: dict[Key, asyncio.Future[bool]] = {}

    async def exists(self, namespace: str, name: str) -> bool:
        key = (namespace, name)
        asking = self._asking.get(key)
        if asking is not None:
            return await asyncio.shield(asking)
        found_missing = self._missing.get(key)
        if found_missing is not None and self._clock() - found_missing < self.window:
            return False
        task = asyncio.ensure_future(self._exists(namespace, name))
        self._asking[key] = task
        try:
            found = await asyncio.shield(task)
        finally:
            self._asking.pop(key, None)
        if found:
            self._missing.pop(key, None)
        else:
            if len(self._missing) >= KEPT:
                self._missing.clear()  # forgetting only costs a GET each
            self._missing[key] = self._clock()
        return found

    def appeared(self, key: Key) -> None:
        """The pool's watch event: it exists (the cache holds it now)."""
        self._missing.pop(key, None)
