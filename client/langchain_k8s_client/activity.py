"""When to report activity: throttled, no background thread, and never late for a long command.

An ordinary operation reports at most once per `interval`. A command reports "busy until now +
its timeout" whenever that reaches past what was last reported, so a long command is never reaped
as idle. The operator stamps reports with its own clock; this only decides when to send one.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from langchain_k8s_client.durations import parse_seconds

MIN_INTERVAL = 1.0
MAX_INTERVAL = 60.0


def interval_for(idle_timeout: str | None) -> float:
    """A fifth of the idle timeout, between 1 s and 60 s (60 s when there is none)."""
    seconds = parse_seconds(idle_timeout) if idle_timeout else None
    if seconds is None:
        return MAX_INTERVAL
    return min(MAX_INTERVAL, max(MIN_INTERVAL, seconds / 5))


@dataclass
class ActivityThrottle:
    interval: float = MAX_INTERVAL
    _last_report: float | None = None
    _busy_until: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def claim(self, busy_seconds: float | None, now: float | None = None) -> float | None:
        """The busy seconds to report now, or None to skip; reserves the report (thread-safe)."""
        now = time.monotonic() if now is None else now
        busy = max(0.0, busy_seconds or 0.0)
        with self._lock:
            due = self._last_report is None or now - self._last_report >= self.interval
            # Re-announce "busy" only when it protects noticeably longer than the last report did: a
            # command ending within `interval` of the reported time is still far from the idle deadline
            # (busy-until + idle timeout, and interval <= idle timeout / 5).
            extends = busy > 0 and now + busy > self._busy_until + self.interval
            if not (due or extends):
                return None
            self._last_report = now
            self._busy_until = max(self._busy_until, now + busy)
            return busy

    def wake(self, now: float | None = None) -> float:
        """The busy seconds for a report sent at once, whatever the interval (waking a suspended session):
        what remains of the busy window already announced, so the command in flight stays protected."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._last_report = now
            return max(0.0, self._busy_until - now)

    def forget(self) -> None:
        """Report on the next operation (a report failed, or the session changed)."""
        with self._lock:
            self._last_report = None
            self._busy_until = 0.0
