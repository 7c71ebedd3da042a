"""Control flow written once for the sync and the async API, and the two drivers that run it.

A flow is a generator that yields effects and receives each one's result (or has the exception thrown
in, so its ``try`` blocks work as written), and returns its own result. An effect is either a
:class:`Call` (a sync callable and its async twin, with the same arguments) or an ``HttpRequest`` of
the sans-IO layer (``runtime``): a flow can ``yield from`` a runtime operation directly, and each
request it yields goes to the driver's ``send`` (the transport: one request with its retries).
:func:`run_sync` calls the sync sides, :func:`run_async` awaits the async ones: the rules (when to
reconnect, re-resolve, retry once, map a result) live only in the flow. Nothing here waits on
anything itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from .wire import HttpRequest, HttpResponse

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """Call ``sync(*args)`` or await ``async_(*args)``, whichever API is running the flow."""

    sync: Callable[..., Any]
    async_: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...] = ()


Effect = Call | HttpRequest
Flow = Generator[Effect, Any, T]
Send = Callable[[HttpRequest], HttpResponse]
ASend = Callable[[HttpRequest], Awaitable[HttpResponse]]


def _no_send(request: HttpRequest) -> Any:
    raise TypeError(f"this flow has no transport to send {request.method} {request.path}")


def run_sync(flow: Flow[T], send: Send = _no_send) -> T:
    """Run ``flow`` on the calling thread; its requests go to ``send``."""
    try:
        effect = next(flow)
        while True:
            try:
                result = send(effect) if isinstance(effect, HttpRequest) else effect.sync(*effect.args)
            except Exception as exc:
                effect = flow.throw(exc)
                continue
            effect = flow.send(result)
    except StopIteration as stop:
        return stop.value
    finally:
        flow.close()


async def run_async(flow: Flow[T], send: ASend = _no_send) -> T:
    """Run ``flow`` on the event loop; it blocks the loop only as long as the async sides do."""
    try:
        effect = next(flow)
        while True:
            try:
                if isinstance(effect, HttpRequest):
                    result = await send(effect)
                else:
                    result = await effect.async_(*effect.args)
            except Exception as exc:
                effect = flow.throw(exc)
                continue
            effect = flow.send(result)
    except StopIteration as stop:
        return stop.value
    finally:
        flow.close()
