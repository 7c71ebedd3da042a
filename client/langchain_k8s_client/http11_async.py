"""The pod's HTTP/1.1 transport for httpx, written once: this async source, and `http11_sync` generated from it
by `http11_unasync` (`make crds`; a unit test fails when it is stale). What it does and why: `http11`.

Only names `http11_unasync` knows how to turn into their sync twins differ between the two: keep to them
(`async def`, `await`, `async for`, the `Async*` types, `aclose`, `handle_async_request`, `async_*` helpers).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterable, AsyncIterator
from typing import cast

import httpx

from . import http11_io
from .http11_protocol import ResponseParser, serialize_head


async def send(stream: http11_io.AsyncStream, request: httpx.Request, head: bytes, timeout: float | None) -> None:
    """The head and a small body in one write; a large or streamed body after it, chunk-framed if chunked."""
    chunked = http11_io.is_chunked(request)
    pending = head
    async for chunk in cast(AsyncIterable[bytes], request.stream):
        if not chunk:
            continue
        framed = http11_io.frame(chunk, chunked)
        if len(pending) + len(framed) <= http11_io.COALESCE_BYTES:
            pending += framed
            continue
        if pending:
            await stream.write(pending, timeout)
        pending = b""
        await stream.write(framed, timeout)
    if chunked:
        pending += b"0\r\n\r\n"
    if pending:
        await stream.write(pending, timeout)


class AsyncBody(httpx.AsyncByteStream):
    """The response body as it arrives, through the head's parser; the connection goes back to the pool only
    when the parser says the response ended cleanly."""

    def __init__(
        self,
        transport: AsyncPodHTTPTransport,
        stream: http11_io.AsyncStream,
        parser: ResponseParser,
        read: float | None,
        deadline: float | None,
    ) -> None:
        self._transport = transport
        self._stream: http11_io.AsyncStream | None = stream
        self._parser = parser
        self._read = read
        self._deadline = deadline

    async def __aiter__(self) -> AsyncIterator[bytes]:
        stream = self._stream
        if stream is None:
            raise httpx.StreamClosed()
        while True:
            data = self._parser.body()
            if data is None:
                return
            if data:
                yield data
                continue
            # Every read, not only those that yield body bytes: trailers yield none.
            self._parser.feed(await stream.read(http11_io.wait(self._read, self._deadline, "the response body")))

    async def aclose(self) -> None:
        stream, self._stream = self._stream, None
        if stream is None:
            return
        if self._parser.reusable:
            self._transport._release(stream)
        else:
            stream.close()


class AsyncPodHTTPTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 with keep-alive (see `http11`); its connections belong to one event loop."""

    def __init__(self) -> None:
        self._idle: list[http11_io.AsyncStream] = []
        self._lock = http11_io.async_lock()
        self._ssl: ssl.SSLContext | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        connect, read, write = http11_io.timeouts(request)
        head = serialize_head(request)
        stream = await self._acquire(http11_io.address(request), connect)
        try:
            await send(stream, request, head, write)
            parser = ResponseParser(request.method)
            total: float | None = request.extensions.get(http11_io.DEADLINE)
            head_by = http11_io.head_deadline(read, total)
            # The whole head within the read timeout: a pod trickling it byte by byte is cut off too.
            while (got := parser.head()) is None:
                parser.feed(await stream.read(http11_io.wait(None, head_by, "the response head")))
        except BaseException:
            stream.close()
            raise
        return httpx.Response(
            got.status,
            headers=got.headers,
            stream=AsyncBody(self, stream, parser, read, total),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": got.reason},
        )

    async def _acquire(self, key: http11_io.Key, timeout: float | None) -> http11_io.AsyncStream:
        with self._lock:
            found, self._idle = http11_io.pick(self._idle, key, time.monotonic())
            if key[2] and self._ssl is None:
                self._ssl = http11_io.ssl_context()
            context = self._ssl
        if found is not None:
            return found
        return await http11_io.async_connect(key, context, timeout)

    def _release(self, stream: http11_io.AsyncStream) -> None:
        stream.idle_since = time.monotonic()
        with self._lock:
            if len(self._idle) < http11_io.MAX_IDLE:
                self._idle.append(stream)
                return
        stream.close()

    async def aclose(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for stream in idle:
            stream.close()
