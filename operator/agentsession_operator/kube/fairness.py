"""Fair turns across namespaces for the operator's passes, and the pace of a session's activity reports.

Every pass (an event's, a deadline's, a take-over's) runs in one of a few slots. While every slot is busy,
the next one goes to the namespaces in turn (round robin), each namespace's own passes in arrival order:
a tenant's thousand new sessions queue behind each other, and another tenant's pass waits for one turn,
not for the thousand (issue 28 item 11). Without the bound, every pass ran at once and queued on the API
client's connections in arrival order.

A due deadline's pass (the session's own: its TTL, idle timeout or a lowered maxTtl, as its status names it;
not a retry or a re-check) waits in a lane of its own, ahead of every other pass, but never takes two turns
in a row while other passes wait: a take-over's, a relist's or a policy
change's pass over 10,000 sessions of a namespace put a deadline that fell meanwhile behind all of them
(issue 53 item 4: seconds late), and a tenant's deadlines still leave half the turns to everyone else.

A session's activity reports are paced: an event that changes nothing but the activity annotation runs a
pass at most once per ACTIVITY_INTERVAL per session (the reconciler defers it; the newest report wins,
and a deadline's pass reads the session first, so an idle deadline never misses a report). A client
flooding its annotation costs one pass and one status write per interval, not one per write.

A pass that waits on something slower than the API server (a node agent's checkpoint: seconds to minutes)
steps aside from its slot meanwhile (FairSlots.aside) and waits in a turn of its own kind (Turns: a few per
namespace, one per node), so sixteen hibernations do not hold every other namespace's passes (issue 49
item 4).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Mapping
from typing import Any

from agentsession_api import names

PASS_SLOTS = 16
"""Passes at once: a pass mostly waits on the API server, which is saturated well before 16 of ours."""


ACTIVITY_INTERVAL = 5.0
"""Seconds between two passes a session's activity reports alone may cause (the client reports at most
every idle timeout / 5, at least 1 s apart; a reaped session is judged on a fresh read anyway)."""


def only_activity_changed(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> bool:
    """`after` differs from `before` in the activity annotation (and its resourceVersion) alone."""
    if before is None or after is None:
        return False

    def rest(body: Mapping[str, Any]) -> tuple[Any, ...]:
        meta = dict(body.get("metadata") or {})
        meta.pop("resourceVersion", None)
        annotations = dict(meta.pop("annotations", None) or {})
        report = annotations.pop(names.ANNOTATION_ACTIVITY, None)
        return report, meta, annotations, body.get("spec"), body.get("status")

    then, now = rest(before), rest(after)
    return then[0] != now[0] and then[1:] == now[1:]


class FairSlots:
    def __init__(self, limit: int = PASS_SLOTS) -> None:
        self.limit = limit
        self.busy = 0
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()
        self._due: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()  # due deadlines' passes
        self._last_due = False  # the last turn went to a due deadline

    def waiting(self) -> int:
        return sum(len(q) for lane in (self._due, self._waiting) for q in lane.values())

    @contextlib.asynccontextmanager
    async def slot(self, namespace: str, due: bool = False) -> AsyncIterator[None]:
        """A slot in `namespace`'s turn; `due`: a deadline's pass, in the lane ahead of the others."""
        await self._acquire(namespace, due)
        try:
            yield
        finally:
            self._release()

    @contextlib.asynccontextmanager
    async def aside(self, namespace: str) -> AsyncIterator[None]:
        """Inside ``slot(namespace)``: give the slot to the next turn while waiting on something that is not
        the API server, then take a turn again (in the namespace's order, as any pass)."""
        self._release()
        try:
            yield
        finally:
            try:
                await self._acquire(namespace)
            except asyncio.CancelledError:
                self.busy += 1  # not granted, yet slot()'s exit releases one: keep the count true
                raise

    async def _acquire(self, namespace: str, due: bool = False) -> None:
        if self.busy < self.limit and not self._waiting and not self._due:
            self.busy += 1
            return
        lane = self._due if due else self._waiting
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        lane.setdefault(namespace, deque()).append(turn)
        try:
            await turn  # _release counted the slot as ours when it granted it
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release()  # granted just as we were cancelled: pass it on
            else:
                queue = lane.get(namespace)
                if queue is not None and turn in queue:
                    queue.remove(turn)
                    if not queue:
                        del lane[namespace]
            raise

    def _next_lane(self) -> OrderedDict[str, deque[asyncio.Future[None]]] | None:
        """The due lane first, but not twice in a row while other passes wait."""
        if self._due and not (self._last_due and self._waiting):
            return self._due
        return self._waiting or self._due or None

    def _release(self) -> None:
        self.busy -= 1
        while self.busy < self.limit and (lane := self._next_lane()) is not None:
            namespace, queue = next(iter(lane.items()))
            turn = queue.popleft()
            if queue:
                lane.move_to_end(namespace)  # its next pass waits for every other namespace's turn
            else:
                del lane[namespace]
            if turn.cancelled():
                continue
            self.busy += 1
            self._last_due = lane is self._due
            turn.set_result(None)


class Turns:
    """At most ``limit`` holders per key at once, the others waiting in arrival order; a key is kept only
    while someone holds or waits for it (namespaces and nodes come and go)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._keys: dict[str, tuple[asyncio.Semaphore, int]] = {}

    def holders(self, key: str) -> int:
        """Holders and waiters of ``key`` (0: none, and nothing kept)."""
        return self._keys.get(key, (None, 0))[1]

    @contextlib.asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        gate, users = self._keys.get(key) or (asyncio.Semaphore(self.limit), 0)
        self._keys[key] = (gate, users + 1)
        try:
            async with gate:
                yield
        finally:
            gate, users = self._keys[key]
            if users == 1:
                del self._keys[key]
            else:
                self._keys[key] = (gate, users - 1)
