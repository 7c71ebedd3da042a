"""Fair turns across namespaces for the operator's passes, and the pace of a session's activity reports.

Every pass (an event's, a deadline's, a take-over's) runs in one of a few slots. While every slot is busy,
the next one goes to the namespaces in turn (round robin), each namespace's own passes in arrival order:
a tenant's thousand new sessions queue behind each other, and another tenant's pass waits for one turn,
not for the thousand (issue 28 item 11). Without the bound, every pass ran at once and queued on the API
client's connections in arrival order.

A session's activity reports are paced: an event that changes nothing but the activity annotation runs a
pass at most once per ACTIVITY_INTERVAL per session (the reconciler defers it; the newest report wins,
and a deadline's pass reads the session first, so an idle deadline never misses a report). A client
flooding its annotation costs one pass and one status write per interval, not one per write.
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

    def waiting(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    @contextlib.asynccontextmanager
    async def slot(self, namespace: str) -> AsyncIterator[None]:
        await self._acquire(namespace)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, namespace: str) -> None:
        if self.busy < self.limit and not self._waiting:
            self.busy += 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(namespace, deque()).append(turn)
        try:
            await turn  # _release counted the slot as ours when it granted it
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release()  # granted just as we were cancelled: pass it on
            else:
                queue = self._waiting.get(namespace)
                if queue is not None and turn in queue:
                    queue.remove(turn)
                    if not queue:
                        del self._waiting[namespace]
            raise

    def _release(self) -> None:
        self.busy -= 1
        while self._waiting and self.busy < self.limit:
            namespace, queue = next(iter(self._waiting.items()))
            turn = queue.popleft()
            if queue:
                self._waiting.move_to_end(namespace)  # its next pass waits for every other namespace's turn
            else:
                del self._waiting[namespace]
            if turn.cancelled():
                continue
            self.busy += 1
            turn.set_result(None)
