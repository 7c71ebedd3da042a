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

Bounds a hostile pod cannot lift: a response head is at most `MAX_HEAD_BYTES` and must arrive within
the request's read timeout in total (httpcore waited the read timeout per received chunk); a chunk
size line is at most `MAX_LINE_BYTES`, the trailer section `MAX_TRAILER_BYTES`; the only transfer
coding is `chunked`; malformed framing raises `httpx.RemoteProtocolError`. With the `DEADLINE`
extension (`limits.read_bounded` sets it) no read waits past that instant, so a pod that keeps the
connection busy without yielding a body byte (endless trailers) is cut there too. The body's size
is bounded by the caller (`limits.read_bounded`).

The parsing is sans-IO (`ResponseParser`); the sync and async drivers only move bytes. `https://`
(a router behind TLS) takes the same path over an `ssl` socket, with httpx's default context
(`httpx.create_ssl_context()`: certifi's CAs, or `SSL_CERT_FILE`/`SSL_CERT_DIR`; ALPN http/1.1), so
the same bounds hold there (httpx's own transport knew only a per-read timeout).

Over 500 lines on purpose: the sans-IO parser and its two byte-moving drivers (sync, async) are one
protocol whose bounds must agree line for line; apart, a bound fixed in one driver is missed in the other.
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
from dataclasses import dataclass
from typing import Final, TypeVar, cast

import httpx

MAX_HEAD_BYTES: Final = 64 * 1024
"""Largest response head (status line and headers) accepted."""

MAX_LINE_BYTES: Final = 4096
"""Largest chunk-size line or trailer line accepted in a chunked body."""

MAX_TRAILER_BYTES: Final = 4096
"""Largest trailer section (every trailer line together) accepted: the runtime sends none, and a
trailer yields no body byte, so endless ones would otherwise be read forever."""

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
_NO_BODY_STATUS: Final = frozenset({204, 304})


@dataclass(frozen=True)
class ResponseHead:
    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    keep_alive: bool


class ResponseParser:
    """One response, fed the bytes received: `head()` then `body()` until it returns None (done).

    Both return b"" / None-for-head when they need more bytes (`feed`; `feed(b"")` is the end of the
    stream). Raises `httpx.RemoteProtocolError` on anything malformed or cut short."""

    def __init__(self, method: str, buffered: bytes = b"") -> None:
        self._method = method
        self._buf = bytearray(buffered)
        self._eof = False
        self._mode = ""  # "length", "chunked", "close" or "none", once the head is parsed
        self._left = 0  # length mode: bytes left; chunked: bytes left in the current chunk
        self._chunk_state = "size"  # size, data, crlf, trailers
        self._trailer_bytes = 0
        self.keep_alive = False
        self._complete = False  # body() returned None

    def feed(self, data: bytes) -> None:
        if data:
            self._buf += data
        else:
            self._eof = True

    @property
    def needs_data(self) -> bool:
        return not self._eof

    def head(self) -> ResponseHead | None:
        while True:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > MAX_HEAD_BYTES:
                    raise httpx.RemoteProtocolError(f"response head larger than {MAX_HEAD_BYTES} bytes")
                if self._eof:
                    raise httpx.RemoteProtocolError("server disconnected without sending a complete response head")
                return None
            if end + 4 > MAX_HEAD_BYTES:
                raise httpx.RemoteProtocolError(f"response head larger than {MAX_HEAD_BYTES} bytes")
            raw = bytes(self._buf[:end])
            del self._buf[: end + 4]
            head = self._parse_head(raw)
            if 100 <= head.status < 200:
                if head.status == 101:
                    raise httpx.RemoteProtocolError("unexpected 101 Switching Protocols")
                continue  # 100 Continue, 103 Early Hints: the real answer follows
            return head

    def _parse_head(self, raw: bytes) -> ResponseHead:
        lines = raw.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        version = parts[0]
        if len(parts) < 2 or version not in (b"HTTP/1.1", b"HTTP/1.0") or len(parts[1]) != 3 or not parts[1].isdigit():
            raise httpx.RemoteProtocolError(f"malformed status line {lines[0][:100]!r}")
        status = int(parts[1])
        reason = parts[2] if len(parts) > 2 else b""
        headers: list[tuple[bytes, bytes]] = []
        lengths: set[bytes] = set()
        codings: list[bytes] = []  # every Transfer-Encoding token, in order
        close = version == b"HTTP/1.0"
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip() or b"\0" in line or b"\n" in line:
                raise httpx.RemoteProtocolError(f"malformed header line {line[:100]!r}")
            value = value.strip(b" \t")
            headers.append((name, value))
            lower = name.lower()
            if lower == b"content-length":
                lengths.add(value)
            elif lower == b"transfer-encoding":
                codings += [token.strip().lower() for token in value.split(b",")]
            elif lower == b"connection":
                tokens = {t.strip().lower() for t in value.split(b",")}
                close = (close and b"keep-alive" not in tokens) or b"close" in tokens
        if self._method == "HEAD" or status in _NO_BODY_STATUS or status < 200:
            self._mode = "none"
        elif codings:
            # Only `chunked`: any other transfer coding would be decoded by no one (h11 refuses it too).
            if codings != [b"chunked"]:
                raise httpx.RemoteProtocolError(f"unsupported Transfer-Encoding {b', '.join(codings)[:100]!r}")
            self._mode = "chunked"
        elif lengths:
            if len(lengths) != 1:
                raise httpx.RemoteProtocolError("conflicting Content-Length headers")
            (length,) = lengths
            if not (length.isdigit() and len(length) <= 18):
                raise httpx.RemoteProtocolError(f"malformed Content-Length {length[:40]!r}")
            self._mode, self._left = "length", int(length)
        else:
            self._mode = "close"
        self.keep_alive = not close and self._mode != "close"
        return ResponseHead(status, reason, headers, self.keep_alive)

    def body(self) -> bytes | None:
        """Body bytes received so far (b"": feed more), or None when the body is complete."""
        data = self._body()
        if data is None:
            self._complete = True
        return data

    @property
    def reusable(self) -> bool:
        """The whole response was read, the server keeps the connection open, and nothing follows it."""
        return self._complete and self.keep_alive and not self._buf

    def _body(self) -> bytes | None:
        if self._mode == "none":
            return None
        if self._mode == "length":
            return self._take_length()
        if self._mode == "close":
            if self._buf:
                data = bytes(self._buf)
                self._buf.clear()
                return data
            return None if self._eof else b""
        return self._take_chunked()

    def _take_length(self) -> bytes | None:
        if self._left == 0:
            return None
        if not self._buf:
            if self._eof:
                raise httpx.RemoteProtocolError(f"server disconnected with {self._left} body bytes missing")
            return b""
        data = bytes(self._buf[: self._left])
        del self._buf[: len(data)]
        self._left -= len(data)
        return data

    def _take_chunked(self) -> bytes | None:
        while True:
            if self._chunk_state == "data":
                if self._left == 0:
                    self._chunk_state = "crlf"
                    continue
                if not self._buf:
                    return self._more()
                data = bytes(self._buf[: self._left])
                del self._buf[: len(data)]
                self._left -= len(data)
                return data
            line = self._line()
            if line is None:
                return self._more()
            if self._chunk_state == "crlf":
                if line:
                    raise httpx.RemoteProtocolError("chunk not followed by CRLF")
                self._chunk_state = "size"
            elif self._chunk_state == "size":
                size = line.split(b";", 1)[0].strip()
                if not size or len(size) > 16 or size.strip(b"0123456789abcdefABCDEF"):
                    raise httpx.RemoteProtocolError(f"malformed chunk size {line[:40]!r}")
                self._left = int(size, 16)
                self._chunk_state = "data" if self._left else "trailers"
            elif not line:  # the empty line after the trailers: done
                self._mode = "none"
                return None
            else:  # a trailer line: read and dropped, but never without end
                self._trailer_bytes += len(line) + 2
                if self._trailer_bytes > MAX_TRAILER_BYTES:
                    raise httpx.RemoteProtocolError(f"chunked body trailers larger than {MAX_TRAILER_BYTES} bytes")

    def _line(self) -> bytes | None:
        end = self._buf.find(b"\r\n")
        if end < 0:
            if len(self._buf) > MAX_LINE_BYTES:
                raise httpx.RemoteProtocolError(f"chunked body line longer than {MAX_LINE_BYTES} bytes")
            return None
        line = bytes(self._buf[:end])
        del self._buf[: end + 2]
        return line

    def _more(self) -> bytes:
        if self._eof:
            raise httpx.RemoteProtocolError("server disconnected in the middle of a chunked body")
        return b""


def serialize_head(request: httpx.Request) -> bytes:
    """The request line and headers (httpx has set Host, Content-Length or Transfer-Encoding)."""
    lines = [request.method.encode("ascii") + b" " + request.url.raw_path + b" HTTP/1.1"]
    lines += [name + b": " + value for name, value in request.headers.raw]
    head = b"\r\n".join(lines) + b"\r\n\r\n"
    # No line break, NUL or stray blank may reach the wire (a header injected through a router header).
    breaks = len(lines) + 1
    if b"\0" in head or head.count(b"\n") != breaks or head.count(b"\r") != breaks or lines[0].count(b" ") != 2:
        raise httpx.LocalProtocolError("a request header or target holds a line break or NUL")
    return head


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
