"""Control flow written once for the sync and the async API.

A flow is a generator that yields :class:`Call` effects (a sync callable and its async twin, with the
same arguments), receives each result (or has the exception thrown in, so its ``try`` blocks work as
written) and returns its own result. :func:`run_sync` calls the sync side, :func:`run_async` awaits the
async side: the rules (when to reconnect, re-resolve, retry once, map a result) live only in the flow.
Like the sans-IO operations of ``runtime`` one level down, nothing here waits on anything itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """Call ``sync(*args)`` or await ``async_(*args)``, whichever API is running the flow."""

    sync: Callable[..., Any]
    async_: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...] = ()


Flow = Generator[Call, Any, T]


def run_sync(flow: Flow[T]) -> T:
    """Run ``flow`` on the calling thread."""
    try:
        effect = next(flow)
        while True:
            try:
                result = effect.sync(*effect.args)
            except Exception as exc:
                effect = flow.throw(exc)
                continue
            effect = flow.send(result)
    except StopIteration as stop:
        return stop.value
    finally:
        flow.close()


async def run_async(flow: Flow[T]) -> T:
    """Run ``flow`` on the event loop; it blocks the loop only as long as the async sides do."""
    try:
        effect = next(flow)
        while True:
            try:
                result = await effect.async_(*effect.args)
            except Exception as exc:
                effect = flow.throw(exc)
                continue
            effect = flow.send(result)
    except StopIteration as stop:
        return stop.value
    finally:
        flow.close()
