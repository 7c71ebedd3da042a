"""What the pod's HTTP/1.1 transport stands on: a connection's bytes, in a blocking and an asyncio flavour (the
one place the two differ), and the pure helpers both drivers share (timeouts, the address, the idle pool's pick).

The transport itself is written once (`http11_async`) and its sync twin generated (`http11_sync`, by
`http11_unasync`): a stream here offers the same methods under both flavours, `read(timeout)` and
`write(data, timeout)` raising httpx's own exceptions, `usable(now)` and `close()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import ssl
import threading
import time
from typing import Final, Protocol, TypeVar

import httpx

DEADLINE: Final = "deadline"
"""Request extension: a `time.monotonic()` instant; no read waits past it (raises `httpx.ReadTimeout`).
`limits.read_bounded` sets it to the answer's total deadline."""

COALESCE_BYTES: Final = 64 * 1024
"""A request body up to this size leaves in the same `send` as the headers."""

KEEPALIVE_EXPIRY: Final = 4.0
"""Seconds an idle connection is kept: below uvicorn's 5 s keep-alive timeout, so a request is not
sent on a connection the runtime is closing at that moment (a command is never sent twice)."""

MAX_IDLE: Final = 8
"""Idle connections kept per transport."""

READ_SIZE: Final = 65536

Key = tuple[str, int, bool]
"""Where a connection goes: host, port, TLS."""


# ---- pure helpers, shared -------------------------------------------------------------------------------


def is_chunked(request: httpx.Request) -> bool:
    return request.headers.get("transfer-encoding", "").lower() == "chunked"


def frame(chunk: bytes, chunked: bool) -> bytes:
    return b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk


def timeouts(request: httpx.Request) -> tuple[float | None, float | None, float | None]:
    timeout = request.extensions.get("timeout", {})
    return timeout.get("connect"), timeout.get("read"), timeout.get("write")


def head_deadline(read: float | None, total: float | None) -> float | None:
    """When the whole response head must have arrived: the read timeout from now, never past `total`."""
    head_by = None if read is None else time.monotonic() + read
    if total is not None:
        head_by = total if head_by is None else min(head_by, total)
    return head_by


def wait(read: float | None, deadline: float | None, what: str) -> float | None:
    """How long the next read may wait: the read timeout, but never past `deadline` (raises once it passed)."""
    if deadline is None:
        return read
    left = deadline - time.monotonic()
    if left <= 0:
        raise httpx.ReadTimeout(f"{what} did not arrive within its deadline")
    return left if read is None else min(read, left)


def address(request: httpx.Request) -> Key:
    url = request.url
    if url.scheme not in ("http", "https"):
        raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
    tls = url.scheme == "https"
    return url.host, url.port or (443 if tls else 80), tls


def ssl_context() -> ssl.SSLContext:
    """httpx's default client context (what its own transport used), offering only HTTP/1.1."""
    context = httpx.create_ssl_context()
    context.set_alpn_protocols(["http/1.1"])
    return context


class Pooled(Protocol):
    key: Key

    def usable(self, now: float) -> bool: ...
    def close(self) -> None: ...


P = TypeVar("P", bound=Pooled)


def pick(idle: list[P], key: Key, now: float) -> tuple[P | None, list[P]]:
    """The newest usable idle connection to `key`, and the idle list without it; unusable ones are closed."""
    kept: list[P] = []
    for conn in idle:
        if conn.usable(now):
            kept.append(conn)
        else:
            conn.close()
    for index in range(len(kept) - 1, -1, -1):
        if kept[index].key == key:
            return kept.pop(index), kept
    return None, kept


# ---- blocking ---------------------------------------------------------------------------------------------


def sync_lock() -> threading.Lock:
    """The idle pool's lock: a sync transport is shared between threads."""
    return threading.Lock()


class SyncStream:
    def __init__(self, sock: socket.socket, key: Key) -> None:
        self.sock = sock
        self.key = key
        self.idle_since = 0.0

    def read(self, timeout: float | None) -> bytes:
        try:
            self.sock.settimeout(timeout)
            return self.sock.recv(READ_SIZE)
        except TimeoutError as exc:
            raise httpx.ReadTimeout(str(exc) or "timed out") from exc
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc

    def write(self, data: bytes, timeout: float | None) -> None:
        try:
            self.sock.settimeout(timeout)
            self.sock.sendall(data)
        except TimeoutError as exc:
            raise httpx.WriteTimeout(str(exc) or "timed out") from exc
        except OSError as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__) from exc

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


def sync_connect(key: Key, context: ssl.SSLContext | None, timeout: float | None) -> SyncStream:
    host, port, tls = key
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls:
            try:  # the handshake, under the connect timeout: nothing was sent yet
                sock = (context or ssl_context()).wrap_socket(sock, server_hostname=host)
            except BaseException:
                sock.close()
                raise
    except TimeoutError as exc:
        raise httpx.ConnectTimeout(str(exc) or "timed out") from exc
    except OSError as exc:  # ssl.SSLError (a refused certificate) included
        raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
    return SyncStream(sock, key)


# ---- asyncio ----------------------------------------------------------------------------------------------


def async_lock() -> contextlib.nullcontext[None]:
    """The idle pool's lock: none, since an async transport's connections belong to one event loop and its
    pool is never touched across an await."""
    return contextlib.nullcontext()


class AsyncStream:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: Key) -> None:
        self.reader = reader
        self.writer = writer
        self.key = key
        self.idle_since = 0.0

    async def read(self, timeout: float | None) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                return await self.reader.read(READ_SIZE)
        except TimeoutError as exc:
            raise httpx.ReadTimeout("timed out") from exc
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc

    async def write(self, data: bytes, timeout: float | None) -> None:
        try:
            async with asyncio.timeout(timeout):
                self.writer.write(data)
                await self.writer.drain()
        except TimeoutError as exc:
            raise httpx.WriteTimeout("timed out") from exc
        except OSError as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__) from exc

    def usable(self, now: float) -> bool:
        return now - self.idle_since <= KEEPALIVE_EXPIRY and not (
            self.reader.at_eof() or self.writer.is_closing() or self.reader.exception() is not None
        )

    def close(self) -> None:
        self.writer.close()


async def async_connect(key: Key, context: ssl.SSLContext | None, timeout: float | None) -> AsyncStream:
    host, port, tls = key
    try:
        async with asyncio.timeout(timeout):  # the TLS handshake included: nothing was sent yet
            if tls:
                tls_context = context or ssl_context()
                reader, writer = await asyncio.open_connection(host, port, ssl=tls_context, server_hostname=host)
            else:
                reader, writer = await asyncio.open_connection(host, port)
    except TimeoutError as exc:
        raise httpx.ConnectTimeout("timed out") from exc
    except OSError as exc:
        raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
    return AsyncStream(reader, writer, key)  # asyncio sets TCP_NODELAY on TCP streams
