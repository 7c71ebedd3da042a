"""Bounds on one answer of a pod's runtime: size and total time, whatever the pod does.

httpx's read timeout is per read: a pod that sends one byte every few seconds keeps a call alive
forever, and `response.content` holds whatever it sends. `read_bounded` / `aread_bounded` stream
the body instead, stop at `ResponseLimits.max_bytes` (checked on Content-Length first, then on the
bytes received, after content decoding so a compressed bomb counts as what it expands to) and at a
total deadline: the request's own read timeout (the command's timeout + margin for `execute`, 30 s
for control scripts, 300 s for transfers) plus `slack_seconds`, counted from sending.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

import httpx

from .errors import ResponseTooLarge, ResponseTooSlow
from .wire import HttpRequest, HttpResponse

DEFAULT_MAX_RESPONSE_BYTES: Final = 256 * 1024 * 1024
"""Largest answer read from a pod (a staged download is one answer): 256 MiB."""

DEFAULT_SLACK_SECONDS: Final = 30.0
"""Seconds an answer may take beyond its request's read timeout, in total."""


@dataclass(frozen=True)
class ResponseLimits:
    """What one answer of the pod may cost: `max_bytes` of body, and in total its request's read timeout
    plus `slack_seconds` from sending to the last byte. Pass to `PodSandbox(response_limits=...)` or
    `AgentSessionSandbox(..., response_limits=...)`."""

    max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    slack_seconds: float = DEFAULT_SLACK_SECONDS

    def __post_init__(self) -> None:
        if self.max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, got {self.max_bytes}")
        if not self.slack_seconds >= 0:
            raise ValueError(f"slack_seconds must be >= 0, got {self.slack_seconds}")

    def total_seconds(self, req: HttpRequest) -> float:
        return req.read_timeout + self.slack_seconds


def _what(req: HttpRequest) -> str:
    return f"the pod's answer to {req.method} {req.path[:120]}"


def too_large(req: HttpRequest, limits: ResponseLimits) -> ResponseTooLarge:
    return ResponseTooLarge(
        f"{_what(req)} is larger than {limits.max_bytes} bytes and was cut off: a runaway or hostile pod, or a "
        f"legitimately large file; raise the bound with response_limits=ResponseLimits(max_bytes=...)",
        limit="max_bytes",
        value=limits.max_bytes,
    )


def too_slow(req: HttpRequest, limits: ResponseLimits) -> ResponseTooSlow:
    total = limits.total_seconds(req)
    return ResponseTooSlow(
        f"{_what(req)} took longer than {total:g} s in total (read timeout {req.read_timeout:g} s + "
        f"slack {limits.slack_seconds:g} s) and was cut off: a stalled or hostile pod; give the call a longer "
        f"timeout or raise response_limits=ResponseLimits(slack_seconds=...)",
        limit="slack_seconds",
        value=limits.slack_seconds,
    )


def _declared_too_large(resp: httpx.Response, limits: ResponseLimits) -> bool:
    declared = resp.headers.get("content-length", "")
    return declared.isascii() and declared.isdigit() and int(declared) > limits.max_bytes


def read_bounded(
    send: Callable[[httpx.Request], httpx.Response], request: httpx.Request, req: HttpRequest, limits: ResponseLimits
) -> HttpResponse:
    """Send (`send` answers with the body still streaming) and read one answer within `limits` (sync). A pod
    silent right at the deadline is cut by the read timeout instead, so the worst case is the deadline plus
    one read timeout."""
    deadline = time.monotonic() + limits.total_seconds(req)
    resp = send(request)
    try:
        if _declared_too_large(resp, limits):
            raise too_large(req, limits)
        body = bytearray()
        for chunk in resp.iter_bytes():
            body += chunk
            if len(body) > limits.max_bytes:
                raise too_large(req, limits)
            if time.monotonic() > deadline:
                raise too_slow(req, limits)
        return HttpResponse(resp.status_code, bytes(body))
    finally:
        resp.close()


async def aread_bounded(
    send: Callable[[httpx.Request], Awaitable[httpx.Response]],
    request: httpx.Request,
    req: HttpRequest,
    limits: ResponseLimits,
) -> HttpResponse:
    """Send and read one answer within `limits` (async: the deadline is exact)."""
    try:
        async with asyncio.timeout(limits.total_seconds(req)):
            resp = await send(request)
            try:
                if _declared_too_large(resp, limits):
                    raise too_large(req, limits)
                body = bytearray()
                async for chunk in resp.aiter_bytes():
                    body += chunk
                    if len(body) > limits.max_bytes:
                        raise too_large(req, limits)
                return HttpResponse(resp.status_code, bytes(body))
            finally:
                await resp.aclose()
    except TimeoutError as exc:
        raise too_slow(req, limits) from exc


__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "DEFAULT_SLACK_SECONDS", "ResponseLimits", "aread_bounded", "read_bounded"]
