"""One thread that calls functions at their time: a sync grep's time budget (`sandbox_files`) without a
thread per search. A `threading.Timer` costs about 0.3 ms to start, a fifth of the watchdog process it
replaced; arming an alarm here costs a lock and a heap push. A due alarm's function runs on a thread of
its own (it sends a request), so a slow one never delays the next alarm.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable


class Alarm:
    """One armed call; `cancel()` before it is due and it never runs."""

    __slots__ = ("at", "call", "cancelled")

    def __init__(self, at: float, call: Callable[[], object]) -> None:
        self.at = at
        self.call = call
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True  # dropped from the heap when it comes up


class Alarms:
    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # the thread is not the child's

    def _reset(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Alarm]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def after(self, seconds: float, call: Callable[[], object]) -> Alarm:
        """Call `call` (on a thread of its own) `seconds` from now, unless cancelled first."""
        alarm = Alarm(time.monotonic() + seconds, call)
        with self._cond:
            heapq.heappush(self._heap, (alarm.at, next(self._order), alarm))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lkc-alarms", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is alarm:
                self._cond.notify()
        return alarm

    def _run(self) -> None:
        while True:
            with self._cond:
                alarm = self._next_due()
            if not alarm.cancelled:
                threading.Thread(target=alarm.call, name="lkc-alarm", daemon=True).start()

    def _next_due(self) -> Alarm:
        """Wait (holding the condition's lock) for the next alarm not cancelled to be due, and take it."""
        while True:
            while self._heap and self._heap[0][2].cancelled:
                heapq.heappop(self._heap)
            if not self._heap:
                self._cond.wait()
                continue
            wait = self._heap[0][0] - time.monotonic()
            if wait <= 0:
                return heapq.heappop(self._heap)[2]
            self._cond.wait(wait)


ALARMS = Alarms()
"""The process's alarms (one thread, started at the first alarm)."""
