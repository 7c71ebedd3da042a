"""When a take-over's first pass over every session is done: the real end of a replica's start or failover.

A replica that becomes leader (or gains shards) passes every session it then knows. Until each of them has
had its pass, deadlines may be late and statuses stale; after, the replica is at rest. Benchmarks and
operators used to guess that moment from CPU idleness; this says it (issue 53 item 2): the gauge
`agentsession_first_pass_done_timestamp_seconds` (beside prometheus_client's process_start_time_seconds)
and one log line with the phases' times: start-up (process start to the listing), the listing, the passes.

A take-over passes the sessions soonest due first (`in_deadline_order`, issue 53 item 4): at 10,000 sessions
its passes take seconds, and a deadline that fell during the handover waited for its session's turn in the
cache's order, up to the whole first pass late.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agentsession_api.phases import is_terminal
from agentsession_api.timestamps import parse_time
from agentsession_operator.infra import metrics
from agentsession_operator.infra.logs import logger

Key = tuple[str, str]

STATUS_DEADLINES = ("expiresAt", "idleDeadline", "pendingMaxTtlAt")
"""The status fields that say when the last leader expected to act next on a session."""

_NEVER = dt.datetime.max.replace(tzinfo=dt.UTC)


def status_deadline(session: Mapping[str, Any] | None) -> dt.datetime | None:
    """The soonest deadline a session's status names (as its last leader wrote them), None without one or
    once the session ended. Only an order: the pass judges the session anew (a TTL changed since, a
    policy, an activity report)."""
    status = session.get("status") if session else None
    if not isinstance(status, Mapping) or is_terminal(status.get("phase")):
        return None
    return min(filter(None, (parse_time(status.get(field)) for field in STATUS_DEADLINES)), default=None)


def in_deadline_order(keys: Iterable[Key], body_of: Callable[[Key], Mapping[str, Any] | None]) -> list[Key]:
    """`keys`, the soonest status deadline first; those without one after them, in the order given."""
    return sorted(keys, key=lambda key: status_deadline(body_of(key)) or _NEVER)


class TakeOver:
    """The sessions a take-over must pass once, and what is told when the last of them has."""

    def __init__(self) -> None:
        self.pending: set[Key] = set()
        self.started: float | None = None  # wall clock of the take-over's start
        self.listed_at: float | None = None  # wall clock when the start-up listing (prime) was done
        self.listing_seconds: dict[str, float] = {}
        self.done_at: float | None = None

    def listed(self, seconds_by_kind: dict[str, float]) -> None:
        """The start-up listing is done: how long each kind took."""
        self.listed_at = time.time()
        self.listing_seconds = dict(seconds_by_kind)

    def begin(self, keys: Iterable[Key]) -> None:
        """A take-over starts: each of `keys` gets one pass (a second take-over adds its own)."""
        self.started = time.time()
        self.pending |= set(keys)
        self.done_at = None
        self._maybe_done()

    def passed(self, key: Key) -> None:
        """A pass over `key` ended (whatever its outcome), or the session is gone."""
        if key in self.pending:
            self.pending.discard(key)
            self._maybe_done()

    def _maybe_done(self) -> None:
        if self.pending or self.started is None or self.done_at is not None:
            return
        self.done_at = time.time()
        metrics.FIRST_PASS_DONE.set(self.done_at)
        process_start = metrics.process_start_time()
        phases = {
            "startup_seconds": round((self.listed_at or self.started) - process_start, 3) if process_start else None,
            "listing_seconds": {k: round(v, 3) for k, v in self.listing_seconds.items()},
            "passes_seconds": round(self.done_at - self.started, 3),
            "since_process_start_seconds": round(self.done_at - process_start, 3) if process_start else None,
        }
        logger().info("first pass done", **phases)
