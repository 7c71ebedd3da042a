"""`ActivityHooks`: one activity report per public sandbox operation, before it runs.

The session layer's `on_activity(busy_seconds)` (or its async twin `aon_activity`) is called before
each operation; it may raise to refuse it. It may also leave its report running beside the operation
and return what waits for it (a function, or an awaitable for the async twin): the operation waits for
it at its end, so no report is left in flight, and the report costs the operation no time of its own.
An operation inside another (BaseSandbox's read and glob call `execute()`) reports nothing again. The
async API never blocks the event loop: without `aon_activity`, `on_activity` runs in a worker thread (it
may call the Kubernetes API). When to send a report at all (the throttle) is `activity`'s concern, not
this one's.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

_in_operation: contextvars.ContextVar[bool] = contextvars.ContextVar("lkc_in_operation", default=False)

Pending = Callable[[], None] | None
"""What `on_activity` returns: None (its report is done), or what waits for the report it left running."""
APending = Awaitable[None] | None
"""What `aon_activity` returns: None, or an awaitable of the report it left running."""


@dataclass(frozen=True)
class ActivityHooks:
    """The two hooks; either or both may be None (nothing is reported)."""

    on_activity: Callable[[float | None], Pending] | None = None
    aon_activity: Callable[[float | None], Awaitable[APending]] | None = None

    @contextmanager
    def operation(self, busy_seconds: float | None) -> Iterator[None]:
        """Report once (unless already inside an operation), then run the block."""
        if _in_operation.get():
            yield
            return
        pending = self.on_activity(busy_seconds) if self.on_activity is not None else None
        token = _in_operation.set(True)
        try:
            yield
        finally:
            _in_operation.reset(token)
            if pending is not None:
                pending()

    @asynccontextmanager
    async def aoperation(self, busy_seconds: float | None) -> AsyncIterator[None]:
        """`operation` for the async API."""
        if _in_operation.get():
            yield
            return
        pending: APending | Pending = None
        if self.aon_activity is not None:
            pending = await self.aon_activity(busy_seconds)
        elif self.on_activity is not None:
            pending = await asyncio.to_thread(self.on_activity, busy_seconds)
        token = _in_operation.set(True)
        try:
            yield
        finally:
            _in_operation.reset(token)
            if callable(pending):
                await asyncio.to_thread(pending)
            elif pending is not None:
                await pending


__all__ = ["ActivityHooks"]
