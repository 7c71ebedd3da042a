"""The pod's HTTP/1.1 transport for httpx, sync: generated from `http11_async` by `http11_unasync`.

Do not edit: change http11_async.py and run `make crds`. What it does and why: `http11`.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable, Iterator
from typing import cast

import httpx

from . import http11_io
from .http11_protocol import ResponseParser, serialize_head


def send(stream: http11_io.SyncStream, request: httpx.Request, head: bytes, timeout: float | None) -> None:
    """The head and a small body in one write; a large or streamed body after it, chunk-framed if chunked."""
    chunked = http11_io.is_chunked(request)
    pending = head
    for chunk in cast(Iterable[bytes], request.stream):
        if not chunk:
            continue
        framed = http11_io.frame(chunk, chunked)
        if len(pending) + len(framed) <= http11_io.COALESCE_BYTES:
            pending += framed
            continue
        if pending:
            stream.write(pending, timeout)
        pending = b""
        stream.write(framed, timeout)
    if chunked:
        pending += b"0\r\n\r\n"
    if pending:
        stream.write(pending, timeout)


class SyncBody(httpx.SyncByteStream):
    """The response body as it arrives, through the head's parser; the connection goes back to the pool only
    when the parser says the response ended cleanly."""

    def __init__(
        self,
        transport: PodHTTPTransport,
        stream: http11_io.SyncStream,
        parser: ResponseParser,
        read: float | None,
        deadline: float | None,
    ) -> None:
        self._transport = transport
        self._stream: http11_io.SyncStream | None = stream
        self._parser = parser
        self._read = read
        self._deadline = deadline

    def __iter__(self) -> Iterator[bytes]:
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
            self._parser.feed(stream.read(http11_io.wait(self._read, self._deadline, "the response body")))

    def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is None:
            return
        if self._parser.reusable:
            self._transport._release(stream)
        else:
            stream.close()


class PodHTTPTransport(httpx.BaseTransport):
    """HTTP/1.1 with keep-alive (see `http11`); its connections belong to one event loop."""

    def __init__(self) -> None:
        self._idle: list[http11_io.SyncStream] = []
        self._lock = http11_io.sync_lock()
        self._ssl: ssl.SSLContext | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        connect, read, write = http11_io.timeouts(request)
        head = serialize_head(request)
        stream = self._acquire(http11_io.address(request), connect)
        try:
            send(stream, request, head, write)
            parser = ResponseParser(request.method)
            total: float | None = request.extensions.get(http11_io.DEADLINE)
            head_by = http11_io.head_deadline(read, total)
            # The whole head within the read timeout: a pod trickling it byte by byte is cut off too.
            while (got := parser.head()) is None:
                parser.feed(stream.read(http11_io.wait(None, head_by, "the response head")))
        except BaseException:
            stream.close()
            raise
        return httpx.Response(
            got.status,
            headers=got.headers,
            stream=SyncBody(self, stream, parser, read, total),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": got.reason},
        )

    def _acquire(self, key: http11_io.Key, timeout: float | None) -> http11_io.SyncStream:
        with self._lock:
            found, self._idle = http11_io.pick(self._idle, key, time.monotonic())
            if key[2] and self._ssl is None:
                self._ssl = http11_io.ssl_context()
            context = self._ssl
        if found is not None:
            return found
        return http11_io.sync_connect(key, context, timeout)

    def _release(self, stream: http11_io.SyncStream) -> None:
        stream.idle_since = time.monotonic()
        with self._lock:
            if len(self._idle) < http11_io.MAX_IDLE:
                self._idle.append(stream)
                return
        stream.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for stream in idle:
            stream.close()
