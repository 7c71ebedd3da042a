"""Bounds on one answer of a pod's runtime: size and total time, whatever the pod does.

httpx's read timeout is per read: a pod that sends one byte every few seconds keeps a call alive
forever, and `response.content` holds whatever it sends. `read_bounded` / `aread_bounded` stream
the body instead, stop at `ResponseLimits.max_bytes` (checked on Content-Length first, then on the
bytes received) and at a total deadline: the request's own read timeout (the command's timeout +
margin for `execute`, 30 s for control scripts, 300 s for transfers) plus `slack_seconds`, counted
from sending. The deadline holds for every read, not only those that yield body bytes: the async
API runs the whole answer under one timeout, the sync one hands it to the transport (`http11.DEADLINE`).

The requests ask for `Accept-Encoding: identity` (`IDENTITY`) and an answer with any other
Content-Encoding is refused before its body is read (`MalformedResponse`; the rule is
`protocol.content_codings_readable`, the TypeScript client's too): a decoder expands a received chunk in
one step before anything can count it (`gzip, gzip` turns a few hundred bytes into gigabytes), and a
gzip stream of empty blocks decodes to nothing for as long as the pod likes. The runtime never
compresses, so nothing legitimate is lost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from .errors import MalformedResponse, ResponseTooLarge, ResponseTooSlow
from .http11 import DEADLINE
from .protocol import (
    CONTENT_ENCODING_HEADER,
    CONTENT_LENGTH_HEADER,
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_SLACK_SECONDS,
    IDENTITY,
    content_codings_readable,
)
from .wire import HttpRequest, HttpResponse


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


def _refuse_coded(resp: httpx.Response, req: HttpRequest) -> None:
    """Raise unless the answer is identity-coded: no decoder ever runs on a pod's bytes."""
    lines = resp.headers.get_list(CONTENT_ENCODING_HEADER)
    if content_codings_readable(lines):
        return
    coding = ", ".join(lines)
    raise MalformedResponse(
        f"{_what(req)} came with Content-Encoding {coding[:100]!r}: this client asks for "
        f"Accept-Encoding: {IDENTITY} and reads no other coding (a decoder expands a compressed answer before "
        f"max_bytes can count it); a hostile or misconfigured pod, or a proxy in between that compresses"
    )


def _declared_too_large(resp: httpx.Response, limits: ResponseLimits) -> bool:
    declared = resp.headers.get(CONTENT_LENGTH_HEADER, "")
    return declared.isascii() and declared.isdigit() and int(declared) > limits.max_bytes


def read_bounded(
    send: Callable[[httpx.Request], httpx.Response], request: httpx.Request, req: HttpRequest, limits: ResponseLimits
) -> HttpResponse:
    """Send (`send` answers with the body still streaming) and read one answer within `limits` (sync).

    The pod's own transport (`http11`, plain or TLS) waits for no read past the deadline. A caller's own
    `httpx.Client` only knows its per-read timeout: there the deadline is checked after each read that
    yields body bytes, so a pod trickling what yields none (trailers) is cut
    only by httpcore's 100 KiB incomplete-event buffer, at up to one read timeout per received byte."""
    deadline = time.monotonic() + limits.total_seconds(req)
    request.extensions[DEADLINE] = deadline
    try:
        resp = send(request)
    except httpx.ReadTimeout as exc:
        if time.monotonic() >= deadline:
            raise too_slow(req, limits) from exc
        raise
    try:
        _refuse_coded(resp, req)
        if _declared_too_large(resp, limits):
            raise too_large(req, limits)
        body = bytearray()
        for chunk in resp.iter_bytes():  # identity-coded (checked above): no decoder expands anything
            body += chunk
            if len(body) > limits.max_bytes:
                raise too_large(req, limits)
            if time.monotonic() > deadline:
                raise too_slow(req, limits)
        return HttpResponse(resp.status_code, bytes(body))
    except httpx.ReadTimeout as exc:
        if time.monotonic() >= deadline:  # the transport cut a read at the deadline
            raise too_slow(req, limits) from exc
        raise
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
                _refuse_coded(resp, req)
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


__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_SLACK_SECONDS",
    "IDENTITY",
    "ResponseLimits",
    "aread_bounded",
    "read_bounded",
]
