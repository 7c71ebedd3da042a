"""A fault-injecting HTTPS proxy between the operator and the kube-apiserver (tests' support code).

It listens on 127.0.0.1 only and terminates TLS with a certificate from a CA the test makes; the
operator's kubeconfig points at it and trusts that CA (its ServiceAccount token passes through
unchanged, so RBAC is the real one). Upstream it speaks TLS to the real API server, verified with the
cluster's CA. Every request is one HTTP/1.1 exchange on its own upstream connection (`Connection:
close` both ways), so the proxy parses request heads and bodies but only the status line of a response.

Faults, each at its own rate, on requests the `eligible` predicate selects (default: everything but
watches):

- 409 Conflict (AlreadyExists for a POST; only where the API server can answer 409), 429
  TooManyRequests with `Retry-After`, 500 InternalError: answered by the proxy, the API server never
  sees the request;
- a connection reset (RST) before forwarding (not applied) or after the API server answered (applied,
  the answer lost: the nasty one for creates);
- a slow response: the API server's answer is held back for `slow_seconds`; a stalled one: forever
  (an hour), as behind a half-open connection.

Watches can be cut (`cut_watches`), held (`hold_watches`: a reconnecting watch waits) and answered
with `410 Gone` in the stream, as the API server answers a watch whose resourceVersion is too old
(`release_watches(gone=True)`): the client has to relist, and nothing tells it what was deleted.

Every request is recorded (arrival time, method, path, user agent, fault, status) for the checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from devcluster import pki


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.target).query)

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch", ["false"])[0] in ("true", "1")

    @property
    def user_agent(self) -> str:
        return self.headers.get("user-agent", "")


@dataclass
class Record:
    arrived: float  # time.monotonic()
    method: str
    target: str
    user_agent: str
    fault: str | None = None
    status: int | None = None
    retry_after: float | None = None
    answered: float | None = None  # when the proxy sent its injected answer
    accepted: float = 0.0  # when its TCP connection was accepted (before the TLS handshake)


@dataclass
class Faults:
    """Rates (0..1) per eligible request; at most one fault per request."""

    conflict: float = 0.0
    throttle: float = 0.0
    retry_after: int = 2
    server_error: float = 0.0
    reset_before: float = 0.0
    reset_after: float = 0.0
    slow: float = 0.0
    slow_seconds: tuple[float, float] = (1.0, 3.0)
    stall: float = 0.0  # forwarded and applied, but the answer never comes (the client must time out)
    eligible: Callable[[Request], bool] = field(default=lambda r: not r.is_watch)

    def pick(self, rng: random.Random, request: Request) -> str | None:
        roll = rng.random()
        for name in ("conflict", "throttle", "server_error", "reset_before", "reset_after", "slow", "stall"):
            rate = float(getattr(self, name))
            if roll < rate:
                return name if name != "conflict" or may_conflict(request) else None
            roll -= rate
        return None


def may_conflict(request: Request) -> bool:
    """Where the API server can answer 409: a create (AlreadyExists), an update or delete (a stale
    resourceVersion or UID precondition), a patch that carries a resourceVersion. A plain merge patch
    never gets one (the server retries its own conflicts), so it gets none here either."""
    if request.method in ("POST", "PUT", "DELETE"):
        return True
    return request.method == "PATCH" and b'"resourceVersion"' in request.body


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
    body["message"] = message
    body.update({"reason": reason, "code": code, "details": details or {}})
    return json.dumps(body).encode()


STALL_SECONDS = 3600.0

_REASONS = {409: "Conflict", 429: "Too Many Requests", 500: "Internal Server Error", 200: "OK"}


class FaultProxy:
    def __init__(self, upstream: str, upstream_ca: Path, workdir: Path, seed: int = 12) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 443
        self.upstream_ssl = ssl.create_default_context(cafile=str(upstream_ca))
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.ca = pki.make_ca(workdir, "proxy-ca", "fault-proxy-ca")
        serving = pki.issue(self.ca, workdir, "proxy", "fault-proxy", server_names=("127.0.0.1",))
        self.server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.server_ssl.load_cert_chain(str(serving.cert), str(serving.key))
        self.faults = Faults()
        self.rng = random.Random(seed)
        self.records: list[Record] = []
        self.port = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._watches: dict[int, tuple[str, asyncio.StreamWriter]] = {}  # id -> (path, client writer)
        self._held: set[str] = set()  # path fragments whose watches wait
        self._gone: set[str] = set()  # path fragments whose next watch gets 410 Gone
        self._released = asyncio.Event()

    # ---- life cycle (called from the test's thread) --------------------------------------------
    def start(self) -> FaultProxy:
        self._thread.start()
        self.port = self._call(self._listen())
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def kubeconfig(self, original: str, path: Path) -> str:
        """A copy of `original` (same user and token) whose cluster is this proxy, trusted by its CA."""
        config = yaml.safe_load(Path(original).read_text())
        for entry in config["clusters"]:
            cluster = entry["cluster"]
            cluster.pop("certificate-authority-data", None)
            cluster.update({"server": self.server, "certificate-authority": str(self.ca.cert)})
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return str(path)

    def set_faults(self, faults: Faults) -> None:
        with self._lock:
            self.faults = faults

    def snapshot(self) -> list[Record]:
        with self._lock:
            return list(self.records)

    def cut_watches(self, fragment: str) -> int:
        """Abort every open watch whose path contains `fragment` (the client reconnects)."""
        return int(self._call(self._cut(fragment)))

    def hold_watches(self, fragment: str) -> None:
        """New watches whose path contains `fragment` wait until released."""
        self._loop.call_soon_threadsafe(self._held.add, fragment)

    def release_watches(self, fragment: str, gone: bool) -> None:
        """Let held watches go on; with `gone`, the next one is answered with 410 Gone (then relist)."""

        def release() -> None:
            self._held.discard(fragment)
            if gone:
                self._gone.add(fragment)
            self._released.set()
            self._released = asyncio.Event()

        self._loop.call_soon_threadsafe(release)

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    async def _listen(self) -> int:
        # TLS is started per connection (not by start_server) so the accept time is known.
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        for _, writer in list(self._watches.values()):
            _reset(writer)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 5)
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _cut(self, fragment: str) -> int:
        cut = 0
        for key, (path, writer) in list(self._watches.items()):
            if fragment in path:
                _reset(writer)
                self._watches.pop(key, None)
                cut += 1
        return cut

    # ---- one client connection: one request ------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted = time.monotonic()
        try:
            await writer.start_tls(self.server_ssl)
            request = await _read_request(reader)
            if request is None:
                return
            with self._lock:
                faults = self.faults
                fault = faults.pick(self.rng, request) if faults.eligible(request) else None
                record = Record(time.monotonic(), request.method, request.target, request.user_agent, fault)
                record.accepted = accepted
                self.records.append(record)
            if request.is_watch:
                await self._watch(request, record, writer)
            else:
                await self._exchange(request, record, faults, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _exchange(self, request: Request, record: Record, faults: Faults, writer: asyncio.StreamWriter) -> None:
        fault = record.fault
        if fault == "conflict":
            if request.method == "POST":
                body = _status(409, "AlreadyExists", "injected: already exists")
            else:
                body = _status(409, "Conflict", "injected: the object has been modified; please apply your changes")
            record.status = 409
            await _answer(writer, 409, body)
        elif fault == "throttle":
            record.status, record.retry_after = 429, float(faults.retry_after)
            details = {"retryAfterSeconds": faults.retry_after}
            body = _status(429, "TooManyRequests", "injected: too many requests", details)
            await _answer(writer, 429, body, {"Retry-After": str(faults.retry_after)})
        elif fault == "server_error":
            record.status = 500
            await _answer(writer, 500, _status(500, "InternalError", "injected: internal error"))
        elif fault == "reset_before":
            _reset(writer)
        else:
            delay = self.rng.uniform(*faults.slow_seconds) if fault == "slow" else 0.0
            delay = STALL_SECONDS if fault == "stall" else delay
            await self._forward(request, record, writer, reset=fault == "reset_after", delay=delay)
        record.answered = time.monotonic()

    async def _forward(
        self, request: Request, record: Record, writer: asyncio.StreamWriter, reset: bool = False, delay: float = 0.0
    ) -> None:
        up_reader, up_writer = await asyncio.open_connection(
            self.upstream_host, self.upstream_port, ssl=self.upstream_ssl, server_hostname=self.upstream_host
        )
        try:
            up_writer.write(_head(request))
            await up_writer.drain()
            first = await up_reader.readline()  # the status line: the API server has handled it
            with contextlib.suppress(ValueError, IndexError):
                record.status = int(first.split()[1])
            if reset:
                _reset(writer)
                return
            if delay:
                await asyncio.sleep(delay)
            writer.write(first)
            while chunk := await up_reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                up_writer.close()

    async def _watch(self, request: Request, record: Record, writer: asyncio.StreamWriter) -> None:
        while any(f in request.path for f in self._held):
            await self._released.wait()
        gone = next((f for f in self._gone if f in request.path), None)
        if gone is not None and "resourceVersion" in request.query:
            self._gone.discard(gone)
            record.fault, record.status = "gone", 410
            # As the API server answers a watch from a compacted resourceVersion: 200, one ERROR event.
            event = {"type": "ERROR", "object": json.loads(_status(410, "Expired", "too old resource version"))}
            await _answer(writer, 200, json.dumps(event).encode() + b"\n")
            return
        key = id(writer)
        self._watches[key] = (request.path, writer)
        try:
            await self._forward(request, record, writer)
        finally:
            self._watches.pop(key, None)


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    body = b""
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readline()).split(b";")[0].strip(), 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                break
            body += chunk[:-2]
        headers.pop("transfer-encoding")
    return Request(method, target, headers, body)


def _head(request: Request) -> bytes:
    skip = {"connection", "keep-alive", "content-length", "transfer-encoding", "proxy-connection"}
    lines = [f"{request.method} {request.target} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in request.headers.items() if name not in skip]
    lines += ["Connection: close"]
    if request.body or request.method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(request.body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + request.body


async def _answer(writer: asyncio.StreamWriter, code: int, body: bytes, extra: dict[str, str] | None = None) -> None:
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body)), "Connection": "close"}
    headers.update(extra or {})
    head = f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    writer.write(head.encode() + b"\r\n" + body)
    await writer.drain()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Abort with a TCP RST (SO_LINGER 0), as a crashed peer or a middlebox does."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
