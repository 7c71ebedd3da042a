"""A small keep-alive HTTP/1.1 transport for httpx, for the pod's runtime (plain `http://` only).

Measured against the pod (raw POSTs of `sh -c true`, 400 interleaved rounds): httpx's default
transport (httpcore + h11) costs 0.22 to 0.26 ms more per request than this one, 15 % of the whole
call; of that, sending headers and body in two `send`s was ~0.05 ms. Here a request goes out in one
`sendall` (headers and a body up to 64 KiB), the response head is parsed in one pass, and the body is
handed to httpx as it arrives. httpx's request and response types stay, with its timeouts and its
exception types (the retry rules in `transport` tell a request that never left,
`ConnectError`/`ConnectTimeout`, from one that may have run), and its mock transport for the unit
tests. No content coding is decoded on the way: the client asks for identity and `limits` refuses
any other before reading the body.

Bounds a hostile pod cannot lift: the size and framing bounds of `http11_protocol` (a response head
of at most `MAX_HEAD_BYTES`, chunk lines and trailers bounded, `chunked` the only transfer coding), and
here the time: a response head must arrive within the request's read timeout in total (httpcore waited
the read timeout per received chunk). With the `DEADLINE` extension (`limits.read_bounded` sets it) no
read waits past that instant, so a pod that keeps the connection busy without yielding a body byte
(endless trailers) is cut there too. The body's size is bounded by the caller (`limits.read_bounded`).

The parsing is sans-IO, in `http11_protocol` (`ResponseParser`, `serialize_head`); the sync and async
drivers here only move bytes and bound the time, both through that one parser, so its bounds cannot
differ between them. `https://` (a router behind TLS) takes the same path over an `ssl` socket, with
httpx's default context (`httpx.create_ssl_context()`: certifi's CAs, or `SSL_CERT_FILE`/`SSL_CERT_DIR`;
ALPN http/1.1), so the same bounds hold there (httpx's own transport knew only a per-read timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Final, TypeVar, cast

import httpx

# The size bounds and ResponseHead moved to http11_protocol (issue 50): still importable from here.
from .http11_protocol import (  # noqa: F401
    MAX_HEAD_BYTES,
    MAX_LINE_BYTES,
    MAX_TRAILER_BYTES,
    ResponseHead,
    ResponseParser,
    serialize_head,
)

DEADLINE: Final = "deadline"
"""Request extension: a `time.monotonic()` instant; the sync transport waits for no read past it
(raises `httpx.ReadTimeout`). `limits.read_bounded` sets it to the answer's total deadline."""

COALESCE_BYTES: Final = 64 * 1024
"""A request body up to this size leaves in the same `send` as the headers."""

KEEPALIVE_EXPIRY: Final = 4.0
"""Seconds an idle connection is kept: below uvicorn's 5 s keep-alive timeout, so a request is not
sent on a connection the runtime is closing at that moment (a command is never sent twice)."""

MAX_IDLE: Final = 8
"""Idle connections kept per transport."""

_READ_SIZE: Final = 65536


def _chunked(request: httpx.Request) -> bool:
    return request.headers.get("transfer-encoding", "").lower() == "chunked"


def _frame(chunk: bytes, chunked: bool) -> bytes:
    return b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk


def _timeouts(request: httpx.Request) -> tuple[float | None, float | None, float | None]:
    timeout = request.extensions.get("timeout", {})
    return timeout.get("connect"), timeout.get("read"), timeout.get("write")


def _wait(read: float | None, deadline: float | None, what: str) -> float | None:
    """How long the next read may wait: the read timeout, but never past `deadline` (raises once it passed)."""
    if deadline is None:
        return read
    left = deadline - time.monotonic()
    if left <= 0:
        raise httpx.ReadTimeout(f"{what} did not arrive within its deadline")
    return left if read is None else min(read, left)


_Key = tuple[str, int, bool]
"""Where a connection goes: host, port, TLS."""


def _address(request: httpx.Request) -> _Key:
    url = request.url
    if url.scheme not in ("http", "https"):
        raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
    tls = url.scheme == "https"
    return url.host, url.port or (443 if tls else 80), tls


def _ssl_context() -> ssl.SSLContext:
    """httpx's default client context (what its own transport used), offering only HTTP/1.1."""
    context = httpx.create_ssl_context()
    context.set_alpn_protocols(["http/1.1"])
    return context


_C = TypeVar("_C", "_Conn", "_AsyncConn")


def _pick(idle: list[_C], key: _Key, now: float) -> tuple[_C | None, list[_C]]:
    """The newest usable idle connection to `key`, and the idle list without it; unusable ones are closed."""
    kept: list[_C] = []
    for conn in idle:
        if conn.usable(now):
            kept.append(conn)
        else:
            conn.close()
    for index in range(len(kept) - 1, -1, -1):
        if kept[index].key == key:
            return kept.pop(index), kept
    return None, kept


# ------------------------------------------------------------------------------------ sync


class _Conn:
    def __init__(self, sock: socket.socket, key: _Key) -> None:
        self.sock = sock
        self.key = key
        self.idle_since = 0.0

    def usable(self, now: float) -> bool:
        # A readable idle socket is closed by the server (or sent garbage): never reuse it.
        if now - self.idle_since > KEEPALIVE_EXPIRY:
            return False
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():  # decrypted, unread: readable too
            return False
        try:
            if hasattr(select, "poll"):  # no FD_SETSIZE limit (select() fails on descriptors over 1023)
                poller = select.poll()
                poller.register(self.sock, select.POLLIN)
                return not poller.poll(0)
            return not select.select([self.sock], [], [], 0)[0]
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class _SyncBody(httpx.SyncByteStream):
    def __init__(
        self,
        transport: PodHTTPTransport,
        conn: _Conn,
        parser: ResponseParser,
        read: float | None,
        deadline: float | None,
    ) -> None:
        self._transport = transport
        self._conn: _Conn | None = conn
        self._parser = parser
        self._read = read
        self._deadline = deadline

    def __iter__(self) -> Iterator[bytes]:
        conn = self._conn
        if conn is None:
            raise httpx.StreamClosed()
        while True:
            data = self._parser.body()
            if data is None:
                return
            if data:
                yield data
                continue
            # Every read, not only those that yield body bytes: trailers yield none.
            self._parser.feed(_recv(conn.sock, _wait(self._read, self._deadline, "the response body")))

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._parser.reusable:
            self._transport._release(conn)
        else:
            conn.close()


def _recv(sock: socket.socket, timeout: float | None) -> bytes:
    try:
        sock.settimeout(timeout)
        return sock.recv(_READ_SIZE)
    except TimeoutError as exc:
        raise httpx.ReadTimeout(str(exc) or "timed out") from exc
    except OSError as exc:
        raise httpx.ReadError(str(exc) or type(exc).__name__) from exc


class PodHTTPTransport(httpx.BaseTransport):
    """Sync HTTP/1.1 over plain sockets with keep-alive (see the module docstring); thread-safe."""

    def __init__(self) -> None:
        self._idle: list[_Conn] = []
        self._lock = threading.Lock()
        self._ssl: ssl.SSLContext | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        connect, read, write = _timeouts(request)
        head = serialize_head(request)
        conn = self._acquire(_address(request), connect)
        try:
            self._send(conn.sock, request, head, write)
            parser = ResponseParser(request.method)
            total: float | None = request.extensions.get(DEADLINE)
            head_by = None if read is None else time.monotonic() + read
            if total is not None:
                head_by = total if head_by is None else min(head_by, total)
            # The whole head within the read timeout: a pod trickling it byte by byte is cut off too.
            while (got := parser.head()) is None:
                parser.feed(_recv(conn.sock, _wait(None, head_by, "the response head")))
        except BaseException:
            conn.close()
            raise
        return httpx.Response(
            got.status,
            headers=got.headers,
            stream=_SyncBody(self, conn, parser, read, total),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": got.reason},
        )

    @staticmethod
    def _send(sock: socket.socket, request: httpx.Request, head: bytes, timeout: float | None) -> None:
        chunked = _chunked(request)
        pending = head
        try:
            sock.settimeout(timeout)
            for chunk in cast(Iterable[bytes], request.stream):
                if not chunk:
                    continue
                framed = _frame(chunk, chunked)
                if len(pending) + len(framed) <= COALESCE_BYTES:
                    pending += framed
                    continue
                if pending:
                    sock.sendall(pending)
                pending = b""
                sock.sendall(framed)
            if chunked:
                pending += b"0\r\n\r\n"
            if pending:
                sock.sendall(pending)
        except TimeoutError as exc:
            raise httpx.WriteTimeout(str(exc) or "timed out") from exc
        except OSError as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__) from exc

    def _acquire(self, key: _Key, timeout: float | None) -> _Conn:
        now = time.monotonic()
        with self._lock:
            found, self._idle = _pick(self._idle, key, now)
            if key[2] and self._ssl is None:
                self._ssl = _ssl_context()
            context = self._ssl
        if found is not None:
            return found
        host, port, tls = key
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls:
                assert context is not None
                try:  # the handshake, under the connect timeout: nothing was sent yet
                    sock = context.wrap_socket(sock, server_hostname=host)
                except BaseException:
                    sock.close()
                    raise
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "timed out") from exc
        except OSError as exc:  # ssl.SSLError (a refused certificate) included
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        return _Conn(sock, key)

    def _release(self, conn: _Conn) -> None:
        conn.idle_since = time.monotonic()
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


# ----------------------------------------------------------------------------------- async


class _AsyncConn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: _Key) -> None:
        self.reader = reader
        self.writer = writer
        self.key = key
        self.idle_since = 0.0

    def usable(self, now: float) -> bool:
        return now - self.idle_since <= KEEPALIVE_EXPIRY and not (
            self.reader.at_eof() or self.writer.is_closing() or self.reader.exception() is not None
        )

    def close(self) -> None:
        self.writer.close()


async def _arecv(conn: _AsyncConn, timeout: float | None) -> bytes:
    try:
        async with asyncio.timeout(timeout):
            return await conn.reader.read(_READ_SIZE)
    except TimeoutError as exc:
        raise httpx.ReadTimeout("timed out") from exc
    except OSError as exc:
        raise httpx.ReadError(str(exc) or type(exc).__name__) from exc


class _AsyncBody(httpx.AsyncByteStream):
    def __init__(
        self, transport: AsyncPodHTTPTransport, conn: _AsyncConn, parser: ResponseParser, read: float | None
    ) -> None:
        self._transport = transport
        self._conn: _AsyncConn | None = conn
        self._parser = parser
        self._read = read

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            raise httpx.StreamClosed()
        while True:
            data = self._parser.body()
            if data is None:
                return
            if data:
                yield data
                continue
            self._parser.feed(await _arecv(conn, self._read))

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._parser.reusable:
            self._transport._release(conn)
        else:
            conn.close()


class AsyncPodHTTPTransport(httpx.AsyncBaseTransport):
    """The async twin of `PodHTTPTransport` (asyncio streams; its connections belong to one event loop)."""

    def __init__(self) -> None:
        self._idle: list[_AsyncConn] = []
        self._ssl: ssl.SSLContext | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        connect, read, write = _timeouts(request)
        head = serialize_head(request)
        conn = await self._acquire(_address(request), connect)
        try:
            await self._send(conn, request, head, write)
            parser = ResponseParser(request.method)
            try:
                async with asyncio.timeout(read):
                    while (got := parser.head()) is None:
                        parser.feed(await _arecv(conn, None))
            except TimeoutError as exc:
                raise httpx.ReadTimeout("the response head did not arrive within the read timeout") from exc
        except BaseException:
            conn.close()
            raise
        return httpx.Response(
            got.status,
            headers=got.headers,
            stream=_AsyncBody(self, conn, parser, read),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": got.reason},
        )

    @staticmethod
    async def _send(conn: _AsyncConn, request: httpx.Request, head: bytes, timeout: float | None) -> None:
        chunked = _chunked(request)
        pending = head
        try:
            async with asyncio.timeout(timeout):
                async for chunk in cast(AsyncIterable[bytes], request.stream):
                    if chunk:
                        pending += _frame(chunk, chunked)
                        if len(pending) > COALESCE_BYTES:
                            conn.writer.write(pending)
                            pending = b""
                            await conn.writer.drain()
                if chunked:
                    pending += b"0\r\n\r\n"
                if pending:
                    conn.writer.write(pending)
                await conn.writer.drain()
        except TimeoutError as exc:
            raise httpx.WriteTimeout("timed out") from exc
        except OSError as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__) from exc

    async def _acquire(self, key: _Key, timeout: float | None) -> _AsyncConn:
        found, self._idle = _pick(self._idle, key, time.monotonic())
        if found is not None:
            return found
        host, port, tls = key
        if tls and self._ssl is None:
            self._ssl = _ssl_context()
        try:
            async with asyncio.timeout(timeout):  # the TLS handshake included: nothing was sent yet
                if tls:
                    reader, writer = await asyncio.open_connection(host, port, ssl=self._ssl, server_hostname=host)
                else:
                    reader, writer = await asyncio.open_connection(host, port)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("timed out") from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        return _AsyncConn(reader, writer, key)  # asyncio sets TCP_NODELAY on TCP streams

    def _release(self, conn: _AsyncConn) -> None:
        conn.idle_since = time.monotonic()
        if len(self._idle) < MAX_IDLE:
            self._idle.append(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


__all__ = ["DEADLINE", "AsyncPodHTTPTransport", "PodHTTPTransport", "ResponseParser"]
