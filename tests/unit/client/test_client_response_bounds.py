"""Response bounds against a hostile pod on loopback (issue 28, item 4).

The bounds of `limits` (max_bytes, the total deadline) held for the tested shapes only: a
`Content-Encoding: gzip, gzip` answer expanded past max_bytes before it was counted, and answers that
kept the connection busy without yielding a body byte (endless chunked trailers, gzip blocks that
decode to nothing) held a sync call past its deadline, because the deadline was only checked when a
body chunk came out of the decoder. Now the client asks for `Accept-Encoding: identity`, refuses any
other coding before reading the body, caps the trailer section, and cuts every read at the deadline.

The server is a real socket server on 127.0.0.1: it answers the client's probe honestly, then attacks.
Every attack stops by itself after `ATTACK_SECONDS`, so a test never hangs longer than that.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import socket
import ssl
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from devcluster import pki
from langchain_k8s_client.errors import MalformedResponse, ResponseTooSlow, SandboxError, TransportError
from langchain_k8s_client.transport import PodEndpoint, ResponseLimits, RetryPolicy, RuntimeTransport

from .fakes import BASE, FakeRuntime, plain, probe_stdout
from .test_client_http11 import parse

ATTACK_SECONDS = 4.0
"""How long an attack goes on at most: far past every deadline below, short enough for a test run."""

READ_TIMEOUT = 0.3
SLACK = 0.2
DEADLINE = READ_TIMEOUT + SLACK
MAX_BYTES = 1024 * 1024

Attack = Callable[[socket.socket, threading.Event], None]


def _answer(body: bytes, *extra: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    return head + b"".join(line + b"\r\n" for line in extra) + b"\r\n" + body


class HostilePod:
    """Answers the client's probe like the runtime, then runs `attack(conn, stop)` for any other request;
    over TLS with `tls` (a router behind https, say)."""

    def __init__(self, attack: Attack, tls: ssl.SSLContext | None = None) -> None:
        self.attack = attack
        self.tls = tls
        self.stop = threading.Event()
        self.heads: list[bytes] = []  # the heads of the attacked requests
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except OSError:  # the client refused the certificate
                conn.close()
                return
        with conn:
            buf = b""
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.lower().split(b"\r\n")
                length = next((int(line[15:]) for line in lines if line.startswith(b"content-length:")), 0)
                while len(buf) < length:
                    buf += conn.recv(65536)
                body, buf = buf[:length], buf[length:]
                if b"@LKCP" in body:
                    conn.sendall(_answer(json.dumps(plain(probe_stdout())).encode()))
                    continue
                self.heads.append(head)
                with contextlib.suppress(OSError):  # the client hung up: the attack is over
                    self.attack(conn, self.stop)
                return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def pod() -> Iterator[Callable[..., HostilePod]]:
    pods: list[HostilePod] = []

    def make(attack: Attack, tls: ssl.SSLContext | None = None) -> HostilePod:
        pods.append(HostilePod(attack, tls))
        return pods[-1]

    yield make
    for one in pods:
        one.close()


def _trickle(conn: socket.socket, stop: threading.Event, first: bytes, again: bytes) -> None:
    """Send `first`, then `again` every 50 ms (well inside the read timeout) until stopped or ATTACK_SECONDS."""
    conn.sendall(first)
    ends = time.monotonic() + ATTACK_SECONDS
    while time.monotonic() < ends and not stop.wait(0.05):
        conn.sendall(again)


def _transport(pod: HostilePod) -> RuntimeTransport:
    return RuntimeTransport(
        PodEndpoint(pod.url),
        retry=RetryPolicy(attempts=1),
        limits=ResponseLimits(max_bytes=MAX_BYTES, slack_seconds=SLACK),
    )


def _call(transport: RuntimeTransport, mode: str) -> object:
    """One control script, sync or async, with the short read timeout."""
    if mode == "sync":
        return transport.script("true", idempotent=False, read_timeout=READ_TIMEOUT)

    async def run() -> object:
        try:
            return await transport.ascript("true", idempotent=False, read_timeout=READ_TIMEOUT)
        finally:
            await transport.aclose()

    return asyncio.run(run())


MODES = pytest.mark.parametrize("mode", ["sync", "async"])


# ------------------------------------------------------------------------------ (a) gzip of gzip


@MODES
@pytest.mark.timeout(20)
def test_gzip_of_gzip_bomb_is_refused_before_it_expands(pod: Callable[..., HostilePod], mode: str) -> None:
    bomb = gzip.compress(gzip.compress(b"\0" * (64 * MAX_BYTES)))  # 64 MiB decoded, a few hundred bytes sent
    assert len(bomb) < 4096
    server = pod(lambda conn, stop: conn.sendall(_answer(bomb, b"Content-Encoding: gzip, gzip")))
    transport = _transport(server)
    tracemalloc.start()
    try:
        with pytest.raises(SandboxError) as caught:
            _call(transport, mode)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        transport.close()
    assert peak < 4 * MAX_BYTES, f"{peak} bytes allocated for a {MAX_BYTES}-byte bound"
    assert isinstance(caught.value, MalformedResponse), repr(caught.value)
    assert "'gzip, gzip'" in str(caught.value) and "identity" in str(caught.value)


# ------------------------------------------------------------------------------ (b) endless trailers


ENDLESS_TRAILERS = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n", b"X-More: 1\r\n")


def _assert_cut_at_the_deadline(server: HostilePod, mode: str) -> None:
    transport = _transport(server)
    started = time.monotonic()
    try:
        with pytest.raises(ResponseTooSlow):
            _call(transport, mode)
    finally:
        transport.close()
    assert time.monotonic() - started < DEADLINE + 1.0


@MODES
@pytest.mark.timeout(10)
def test_endless_chunked_trailers_fail_at_the_deadline(pod: Callable[..., HostilePod], mode: str) -> None:
    server = pod(lambda conn, stop: _trickle(conn, stop, *ENDLESS_TRAILERS))
    _assert_cut_at_the_deadline(server, mode)


def test_the_trailer_section_is_capped() -> None:
    trailers = b"X-More: 1\r\n" * 1000 + b"\r\n"  # 11 kB of trailers: the runtime sends none
    with pytest.raises(httpx.RemoteProtocolError, match="trailers larger than"):
        parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n" + trailers, step=512)
    assert parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX: 1\r\n\r\n")[1] == b"{}"


# ------------------------------------------------------------------------------ (c) zero-yield gzip blocks

# A gzip member header, then empty non-final stored deflate blocks: each decodes to nothing, forever.
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
EMPTY_STORED_BLOCK = b"\x00\x00\x00\xff\xff"


def test_empty_stored_blocks_decode_to_nothing() -> None:
    import zlib

    decoder = zlib.decompressobj(zlib.MAX_WBITS | 16)
    assert decoder.decompress(GZIP_HEADER + EMPTY_STORED_BLOCK * 1000) == b"" and not decoder.eof


@MODES
@pytest.mark.timeout(10)
def test_zero_yield_gzip_blocks_fail_by_the_deadline(pod: Callable[..., HostilePod], mode: str) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nConnection: close\r\n\r\n"
    server = pod(lambda conn, stop: _trickle(conn, stop, head + GZIP_HEADER, EMPTY_STORED_BLOCK))
    transport = _transport(server)
    started = time.monotonic()
    try:
        with pytest.raises(SandboxError) as caught:
            _call(transport, mode)
    finally:
        transport.close()
    assert time.monotonic() - started < DEADLINE + 1.0
    assert isinstance(caught.value, MalformedResponse | ResponseTooSlow), repr(caught.value)


# ------------------------------------------------------------------------------ (d) any other coding


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "zstd", "x-custom", "identity, gzip", "GZIP"])
@pytest.mark.timeout(10)
def test_any_content_encoding_but_identity_is_refused_by_name(pod: Callable[..., HostilePod], coding: str) -> None:
    body = json.dumps(plain("hi")).encode()  # not encoded at all: the header alone must be refused
    server = pod(lambda conn, stop: conn.sendall(_answer(body, b"Content-Encoding: " + coding.encode())))
    transport = _transport(server)
    try:
        with pytest.raises(MalformedResponse, match=f"Content-Encoding '{coding}'"):
            _call(transport, "sync")
    finally:
        transport.close()


@pytest.mark.parametrize("extra", [[], [b"Content-Encoding: identity"]], ids=["none", "identity"])
@pytest.mark.timeout(10)
def test_identity_answers_are_read_and_identity_is_asked_for(
    pod: Callable[..., HostilePod], extra: list[bytes]
) -> None:
    body = json.dumps(plain("hi")).encode()
    server = pod(lambda conn, stop: conn.sendall(_answer(body, *extra)))
    transport = _transport(server)
    try:
        assert _call(transport, "sync").stdout == "hi"  # type: ignore[attr-defined]
    finally:
        transport.close()
    assert b"\r\naccept-encoding: identity" in server.heads[0].lower()


def test_a_callers_own_httpx_client_asks_for_identity_too() -> None:
    fake = FakeRuntime(answers=[plain("hi")])
    client = httpx.Client(transport=httpx.MockTransport(fake.handler))  # sends gzip, deflate, ... by default
    extra = {"accept-encoding": "gzip"}  # e.g. a router connection's extra_headers
    transport = RuntimeTransport(PodEndpoint(BASE, headers=extra), client=client)
    assert transport.script("true", idempotent=False).stdout == "hi"
    assert {r.headers.get_list("accept-encoding")[0] for r in fake.requests} == {"identity"}
    assert all(len(r.headers.get_list("accept-encoding")) == 1 for r in fake.requests)
    transport.close()


# ------------------------------------------------------------------------------ transfer codings


@pytest.mark.parametrize("coding", [b"gzip, chunked", b"gzip", b"chunked, chunked"])
def test_a_transfer_coding_other_than_chunked_is_refused(coding: bytes) -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: " + coding + b"\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    with pytest.raises(httpx.RemoteProtocolError, match="Transfer-Encoding"):
        parse(raw)


# ------------------------------------------------------------------------------ a router behind https


@pytest.fixture
def tls_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    """A server context for 127.0.0.1 whose CA the client trusts (SSL_CERT_FILE, as httpx reads it)."""
    ca = pki.make_ca(tmp_path, "ca", "test-ca")
    leaf = pki.issue(ca, tmp_path, "router", "router", server_names=("127.0.0.1",))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.cert))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(leaf.cert, leaf.key)
    return context


@MODES
@pytest.mark.timeout(10)
def test_endless_trailers_over_https_fail_at_the_deadline(
    pod: Callable[..., HostilePod], tls_pod: ssl.SSLContext, mode: str
) -> None:
    # The https path went through httpx's own transport, which knows only a per-read timeout.
    server = pod(lambda conn, stop: _trickle(conn, stop, *ENDLESS_TRAILERS), tls_pod)
    _assert_cut_at_the_deadline(server, mode)


@MODES
@pytest.mark.timeout(10)
def test_https_answers_are_read_and_the_certificate_is_checked(
    pod: Callable[..., HostilePod], tls_pod: ssl.SSLContext, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = json.dumps(plain("hi")).encode()
    server = pod(lambda conn, stop: conn.sendall(_answer(body)), tls_pod)
    transport = _transport(server)
    try:
        assert _call(transport, mode).stdout == "hi"  # type: ignore[attr-defined]
    finally:
        transport.close()
    assert b"\r\naccept-encoding: identity" in server.heads[0].lower()
    monkeypatch.delenv("SSL_CERT_FILE")  # the system CAs do not know the test CA
    untrusted = _transport(server)
    try:
        with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED") as caught:
            _call(untrusted, mode)
    finally:
        untrusted.close()
    assert caught.value.maybe_delivered is False
