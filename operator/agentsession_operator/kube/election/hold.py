"""Every write bound to the leadership hold that allows it (issue 54 item 1), as rules plus a small registry.

A replica acts on a namespace only while it holds the Lease that covers it (the single Lease, or the
namespace's shard): `kube/election/lease.py` counts a hold until `renew_deadline` after the last renewal, so a
standby may take over only `lease_duration` after it. Checking that once, before a request, was not enough:
a write could then wait behind a Retry-After gate or be sent again, and land after another replica took the
Lease. So a pass binds its writes to its hold (`bind`), and the transport (kube/transport.py) checks the
hold before every attempt of a write, after every wait: a write is sent only while the hold lasts
`WRITE_MARGIN` more, with the rest of the hold as its client timeout and as the API server's own request
deadline (`?timeout=`), so neither side carries it past the hold. A graceful release stops new writes,
then waits for the ones under way (`IN_FLIGHT.drain`) before it lets the Lease go.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

WRITE_MARGIN: Final = 1.0
"""Seconds before the hold's end after which no write is sent: the time a request needs to reach the API
server (`lease_duration - renew_deadline`, 3 s by default, is what a take-over waits beyond the hold)."""


class NotLeader(Exception):
    """This replica is (no longer) the leader of what it was about to write: the leader's pass covers it."""


@dataclass(frozen=True)
class Hold:
    """The Lease that lets this replica write, until when (monotonic seconds) it may, and in which term:
    the Lease's `leaseTransitions` when this replica took it (a new holder makes a new term)."""

    lease: str
    until: float
    term: int = 0

    def remaining(self, now: float) -> float:
        """Seconds a write may still take (its margin kept off)."""
        return self.until - WRITE_MARGIN - now


HoldOf = Callable[[], Hold | None]
"""The current hold of a pass's writes (None: lost). Asked again before every attempt: renewals extend it."""

_BOUND: contextvars.ContextVar[HoldOf | None] = contextvars.ContextVar("write_hold", default=None)


@contextmanager
def bind(hold_of: HoldOf | None) -> Iterator[None]:
    """The writes made in this context (tasks spawned from it included) go only while `hold_of` holds;
    None: unbound (a replica without election)."""
    token = _BOUND.set(hold_of)
    try:
        yield
    finally:
        _BOUND.reset(token)


def bound() -> HoldOf | None:
    """The hold the current context's writes are bound to, None when unbound."""
    return _BOUND.get()


def check(hold_of: HoldOf, lease: str | None, now: float) -> Hold:
    """The hold to send a write under, or NotLeader: lost, another Lease's now, or ending within the margin."""
    hold = hold_of()
    if hold is None or (lease is not None and hold.lease != lease) or hold.remaining(now) <= 0:
        where = f"Lease {lease}" if lease else "the Lease"
        raise NotLeader(f"the hold of {where} ends before this write could be sent")
    return hold


def server_timeout(remaining: float) -> str:
    """The API server's request deadline for a write with `remaining` seconds of hold (whole seconds, down)."""
    return f"{max(1, math.floor(remaining))}s"


class InFlight:
    """The writes under way, per Lease: a release waits for them (bounded)."""

    def __init__(self) -> None:
        self._count: Counter[str] = Counter()
        self._waiters: set[asyncio.Future[None]] = set()

    @contextmanager
    def writing(self, lease: str) -> Iterator[None]:
        self._count[lease] += 1
        try:
            yield
        finally:
            self._count[lease] -= 1
            if self._count[lease] <= 0:
                del self._count[lease]
            for waiter in self._waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def count(self, lease: str) -> int:
        return self._count[lease]

    async def drain(self, lease: str, timeout: float, clock: Callable[[], float] = time.monotonic) -> bool:
        """Wait until no write under `lease` is under way, at most `timeout` seconds; True when none is."""
        deadline = clock() + timeout
        while self._count[lease] > 0:
            left = deadline - clock()
            if left <= 0:
                return False
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.add(waiter)
            try:
                await asyncio.wait_for(waiter, left)
            except TimeoutError:
                return False
            finally:
                self._waiters.discard(waiter)
        return True


IN_FLIGHT: Final = InFlight()
