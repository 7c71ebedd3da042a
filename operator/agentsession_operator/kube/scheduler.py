"""One deadline scheduler for every session: a heap and a single task, not a kopf timer per object.

kopf timers cost an asyncio task per object and `idle=` resets on the operator's own writes; this
wakes once per due deadline, however many sessions there are. Deadlines live in memory only: after a
restart, the initial listing reconciles every session, which schedules its deadlines again.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import heapq
from collections.abc import Callable, Coroutine
from typing import Any

from agentsession_operator.kube.cache import Key


class DeadlineScheduler:
    def __init__(self, fire: Callable[[Key, dt.datetime], Coroutine[Any, Any, None]]) -> None:
        self._fire = fire
        self._heap: list[tuple[dt.datetime, Key]] = []
        self._due: dict[Key, dt.datetime] = {}  # the one live deadline per key; heap entries not here are stale
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._due)

    def schedule(self, key: Key, at: dt.datetime) -> None:
        """Wake for `key` at `at` (replacing any deadline it had)."""
        if self._due.get(key) == at:
            return
        self._due[key] = at
        heapq.heappush(self._heap, (at, key))
        if self._heap[0] == (at, key):
            self._wakeup.set()

    def cancel(self, key: Key) -> None:
        self._due.pop(key, None)

    def due(self, key: Key) -> dt.datetime | None:
        return self._due.get(key)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="deadline-scheduler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for task in list(self._running):
            task.cancel()

    async def _run(self) -> None:
        while True:
            now = dt.datetime.now(dt.UTC)
            while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
                heapq.heappop(self._heap)  # stale: rescheduled or cancelled
            if self._heap and self._heap[0][0] <= now:
                at, key = heapq.heappop(self._heap)
                del self._due[key]
                task: asyncio.Task[None] = asyncio.create_task(self._fire(key, at))
                self._running.add(task)
                task.add_done_callback(self._running.discard)
                continue
            timeout = (self._heap[0][0] - now).total_seconds() if self._heap else None
            self._wakeup.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)
