"""The pod's HTTP/1.1 transport (http11): framing, keep-alive, one send per small request, bounds,
and httpx's exception types, against a scripted server on loopback. The parser is fuzzed."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langchain_k8s_client import http11_protocol, http11_sync, http11_unasync
from langchain_k8s_client.http11 import DEADLINE, AsyncPodHTTPTransport, PodHTTPTransport
from langchain_k8s_client.http11_protocol import ResponseParser

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def parse(raw: bytes, method: str = "POST", step: int = 7) -> tuple[int, bytes, bool]:
    """Feed `raw` in pieces of `step` bytes, then the end of the stream; the status, body, keep-alive."""
    parser = ResponseParser(method)
    pieces = [raw[i : i + step] for i in range(0, len(raw), step)] + [b""]
    head = None
    while head is None:
        head = parser.head()
        if head is None:
            parser.feed(pieces.pop(0))
    body = b""
    while (data := parser.body()) is not None:
        if data:
            body += data
        else:
            parser.feed(pieces.pop(0))
    return head.status, body, parser.keep_alive


def test_content_length_chunked_and_close_delimited_bodies() -> None:
    assert parse(OK) == (200, b"ok", True)
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n"
    assert parse(chunked) == (200, b"abcde", True)
    assert parse(b"HTTP/1.1 200 OK\r\n\r\nuntil the end") == (200, b"until the end", False)
    assert parse(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx") == (200, b"x", False)
    assert parse(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx")[2] is False
    assert parse(b"HTTP/1.1 100 Continue\r\n\r\n" + OK) == (200, b"ok", True)
    assert parse(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n") == (204, b"", True)
    assert parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", method="HEAD") == (200, b"", True)


@pytest.mark.parametrize(
    "raw",
    [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/2 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\ncut",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Len",
        b"",
    ],
)
def test_malformed_or_cut_answers_are_protocol_errors(raw: bytes) -> None:
    with pytest.raises(httpx.RemoteProtocolError):
        parse(raw)


def test_head_and_chunk_lines_are_bounded() -> None:
    with pytest.raises(httpx.RemoteProtocolError, match="larger than"):
        parse(b"HTTP/1.1 200 OK\r\nX: " + b"a" * http11_protocol.MAX_HEAD_BYTES, step=4096)
    endless = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * (http11_protocol.MAX_LINE_BYTES + 10)
    with pytest.raises(httpx.RemoteProtocolError, match="longer than"):
        parse(endless, step=1024)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400), st.integers(1, 50))
def test_fuzzed_answers_parse_or_raise_a_protocol_error(raw: bytes, step: int) -> None:
    for data in (raw, b"HTTP/1.1 200 OK\r\n" + raw, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + raw):
        with contextlib.suppress(httpx.RemoteProtocolError):
            parse(data, step=step)


# ------------------------------------------------------------------------ against a loopback server


class Server:
    """Accepts connections on 127.0.0.1; `reply(request_bytes, conn)` answers each request read."""

    def __init__(self, reply: Callable[[bytes, socket.socket], None]) -> None:
        self.reply = reply
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.first_recvs: list[bytes] = []
        self.requests: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            buf = b""
            while True:
                first = True
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    if first:
                        self.first_recvs.append(data)
                        first = False
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                while len(buf) < length:
                    buf += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + buf[:length])
                buf = buf[length:]
                try:
                    self.reply(self.requests[-1], conn)
                except OSError:
                    return

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server_factory() -> Iterator[Callable[[Callable[[bytes, socket.socket], None]], Server]]:
    servers: list[Server] = []

    def make(reply: Callable[[bytes, socket.socket], None]) -> Server:
        servers.append(Server(reply))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def echo(request: bytes, conn: socket.socket) -> None:
    body = request.partition(b"\r\n\r\n")[2]
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


def test_keep_alive_one_send_per_small_request_and_bodies_intact(server_factory: Callable[..., Server]) -> None:
    server = server_factory(echo)
    with httpx.Client(transport=PodHTTPTransport(), trust_env=False) as client:
        for i in range(5):
            body = b'{"command": "x%d"}' % i
            assert client.post(server.url + "/execute", content=body).content == body
        big = bytes(range(256)) * 4096  # 1 MiB: headers first, then the body
        assert client.post(server.url + "/upload", content=big).content == big
    assert server.connections == 1
    assert all(first.endswith(b"}") for first in server.first_recvs[:5])  # headers and body arrived together


def test_chunked_request_bodies_are_framed(server_factory: Callable[..., Server]) -> None:
    server = server_factory(lambda request, conn: conn.sendall(OK))

    def chunks() -> Iterator[bytes]:
        yield b"abc"
        yield b""
        yield b"de"

    with httpx.Client(transport=PodHTTPTransport(), trust_env=False) as client:
        request = client.build_request("POST", server.url + "/x", content=chunks())
        assert request.headers["transfer-encoding"] == "chunked"
        # The server above reads by Content-Length: send by hand and read the raw bytes instead.
        sent: list[bytes] = []

        class Recorder:
            def write(self, data: bytes, timeout: float | None) -> None:
                sent.append(data)

        http11_sync.send(Recorder(), request, http11_protocol.serialize_head(request), None)  # type: ignore[arg-type]
    assert len(sent) == 1 and sent[0].endswith(b"\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")


def test_an_idle_connection_the_server_closed_is_not_reused(server_factory: Callable[..., Server]) -> None:
    def reply_then_close(request: bytes, conn: socket.socket) -> None:
        conn.sendall(OK)
        conn.shutdown(socket.SHUT_WR)

    server = server_factory(reply_then_close)
    with httpx.Client(transport=PodHTTPTransport(), trust_env=False) as client:
        assert client.post(server.url + "/a", content=b"1").content == b"ok"
        time.sleep(0.2)  # the FIN arrives: the next request must open a new connection, not fail
        assert client.post(server.url + "/a", content=b"2").content == b"ok"
    assert server.connections == 2


def test_connection_refused_is_a_connect_error() -> None:
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with httpx.Client(transport=PodHTTPTransport(), trust_env=False) as client, pytest.raises(httpx.ConnectError):
        client.post(f"http://127.0.0.1:{port}/x", content=b"1")


def test_a_trickled_head_is_cut_at_the_read_timeout_in_total(server_factory: Callable[..., Server]) -> None:
    def trickle(request: bytes, conn: socket.socket) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100:
            conn.sendall(bytes([byte]))
            time.sleep(0.02)

    server = server_factory(trickle)
    started = time.monotonic()
    with httpx.Client(transport=PodHTTPTransport(), trust_env=False) as client, pytest.raises(httpx.ReadTimeout):
        client.post(server.url + "/x", content=b"1", timeout=httpx.Timeout(5.0, read=0.3))
    assert time.monotonic() - started < 1.5


def test_gzip_answers_are_decoded_by_httpx(server_factory: Callable[..., Server]) -> None:
    packed = gzip.compress(b"z" * 10000)

    def reply(request: bytes, conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(packed) + packed)

    server = server_factory(reply)
    with httpx.Client(transport=PodHTTPTransport(), trust_env=False) as client:
        assert client.get(server.url + "/").content == b"z" * 10000


def test_header_injection_is_refused() -> None:
    request = httpx.Request("GET", "http://127.0.0.1:1/", headers={"X-Sandbox-ID": "a"})
    request.headers._list.append((b"x-bad", b"x-bad", b"a\r\nInjected: 1"))  # httpx itself refuses most of these
    with pytest.raises(httpx.LocalProtocolError):
        http11_protocol.serialize_head(request)


def test_async_keep_alive_bodies_and_a_closed_idle_connection(server_factory: Callable[..., Server]) -> None:
    server = server_factory(echo)
    closing = server_factory(lambda request, conn: (conn.sendall(OK), conn.shutdown(socket.SHUT_WR)))

    async def run() -> None:
        async with httpx.AsyncClient(transport=AsyncPodHTTPTransport(), trust_env=False) as client:
            for i in range(3):
                assert (await client.post(server.url + "/e", content=b"%d" % i)).content == b"%d" % i
            big = b"y" * (1024 * 1024)
            assert (await client.post(server.url + "/u", content=big)).content == big
            assert (await client.post(closing.url + "/c", content=b"1")).content == b"ok"
            await asyncio.sleep(0.2)
            assert (await client.post(closing.url + "/c", content=b"2")).content == b"ok"

    asyncio.run(run())
    assert server.connections == 1 and closing.connections == 2


def test_the_sync_transport_is_generated_from_the_async_one() -> None:
    """Issue 50 item 3: the transport is written once; `make crds` regenerates http11_sync.py from it."""
    assert http11_unasync.drift() == [], "http11_sync.py is stale: run `make crds`"


def test_unasync_turns_the_async_names_into_their_sync_twins() -> None:
    source = '"""doc"""\nasync def f(s: AsyncStream) -> None:\n    async for x in y:\n        await s.aclose()\n'
    assert http11_unasync.render(source).split('"""')[-1] == (
        "\ndef f(s: SyncStream) -> None:\n    for x in y:\n        s.close()\n"
    )


def test_the_async_transport_honours_the_deadline_too(server_factory: Callable[..., Server]) -> None:
    """Before, only the sync transport bounded a response by `DEADLINE`: the async one waited its read timeout
    per received chunk, so endless trailers held an async caller past the answer's deadline."""

    def endless(request: bytes, conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n")
        with contextlib.suppress(OSError):
            for _ in range(200):
                conn.sendall(b"X: y\r\n")
                time.sleep(0.02)

    server = server_factory(endless)

    async def run() -> None:
        async with httpx.AsyncClient(transport=AsyncPodHTTPTransport(), trust_env=False) as client:
            request = client.build_request("GET", server.url + "/", timeout=httpx.Timeout(5.0))
            request.extensions[DEADLINE] = time.monotonic() + 0.3
            response = await client.send(request, stream=True)
            with pytest.raises(httpx.ReadTimeout):
                await response.aread()
            await response.aclose()

    started = time.monotonic()
    asyncio.run(run())
    assert time.monotonic() - started < 2.0
