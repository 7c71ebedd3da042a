"""Slow clients against the node agent's HTTP server (issue 49 item 5): whoever reaches its port (the
NetworkPolicy admits only the operator, where a CNI enforces it) must not hold its threads.

A read of the request waited at most the socket timeout (30 s), but each read restarted that wait: a client
sending its request a byte every few seconds (the header, or the body after a valid header) held a thread
for as long as it liked. The whole request (line, header and body) must now arrive within the socket
timeout of the connection's start.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from agentsession_nodeagent import checkpointer, server
from tests.unit.nodeagent.test_nodeagent import OPERATOR, node, post, review

__all__ = ["node"]  # the fixture, imported for these tests

TIMEOUT = 1.0
"""The agent's socket timeout in these tests (30 s in the DaemonSet)."""


@pytest.fixture
def agent(node: checkpointer.Node) -> Iterator[tuple[str, int]]:
    httpd = server.serve(server.Agent(node, review, OPERATOR), "127.0.0.1", 0, socket_timeout=TIMEOUT)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield "127.0.0.1", httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


def _drip(address: tuple[str, int], head: bytes, drip: bytes, every: float = 0.3, longest: float = 6.0) -> float:
    """Send ``head`` at once, then ``drip`` a byte every ``every`` seconds (each read gets a byte well within
    the socket timeout); the seconds until the agent closed the connection (``longest`` if it never did)."""
    started = time.monotonic()
    with socket.create_connection(address, timeout=10) as conn:
        conn.sendall(head)
        conn.settimeout(every)
        for byte in drip:
            if time.monotonic() - started > longest:
                return longest
            try:
                conn.sendall(bytes([byte]))
                if conn.recv(1024) == b"":
                    return time.monotonic() - started
            except TimeoutError:
                continue  # still open, nothing answered: the next byte
            except OSError:  # reset: closed
                return time.monotonic() - started
    return longest


def test_a_header_sent_a_byte_at_a_time_is_dropped_at_the_timeout(agent: tuple[str, int]) -> None:
    """Attack: the request line, then a header a byte every 0.3 s. Before: held for the whole 6 s (and for
    ever: each read got its byte within the 1 s timeout)."""
    held = _drip(agent, b"POST /v1/list HTTP/1.1\r\n", b"X-Slow: " + b"a" * 100)
    assert held < 3 * TIMEOUT, f"held {held:.1f} s"


def test_a_body_sent_a_byte_at_a_time_is_dropped_at_the_timeout(agent: tuple[str, int]) -> None:
    """Attack: a whole, valid header (the operator's token: a token that passes the review, or any token,
    since the agent reads the header before it judges it) announcing 200 bytes of body, sent a byte every
    0.3 s. Before: held for the whole 6 s (a minute in all)."""
    head = (
        b"POST /v1/list HTTP/1.1\r\nHost: agent\r\nAuthorization: Bearer operator-token\r\n"
        b"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n"
    )
    held = _drip(agent, head, b"{" + b" " * 198 + b"}")
    assert held < 3 * TIMEOUT, f"held {held:.1f} s"


def test_a_stalled_half_request_does_not_block_the_next_one(agent: tuple[str, int]) -> None:
    """A connection holding half a request while the operator's next request and the kubelet's probe come:
    both answered at once (each connection has its own thread; this held before too)."""
    host, port = agent
    with socket.create_connection(agent, timeout=10) as stalled:
        stalled.sendall(b"POST /v1/checkpoint HTTP/1.1\r\nContent-Le")
        started = time.monotonic()
        status, body = post(f"http://{host}:{port}", "/v1/list", {}, "operator-token")
        assert status == 200 and body == {"images": []}
        with socket.create_connection(agent, timeout=10) as probe:
            probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n")
            assert probe.recv(1024).startswith(b"HTTP/1.0 200")
        assert time.monotonic() - started < TIMEOUT


class _Held(server.BaseHTTPRequestHandler):
    """Answers once the test lets it: a checkpoint being written."""

    entered = threading.Event()
    release = threading.Event()

    def do_GET(self) -> None:
        self.entered.set()
        self.release.wait(timeout=10)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_stopping_agent_lets_the_request_in_flight_finish() -> None:
    """A SIGTERM ended the agent only at the grace period's SIGKILL (PID 1 ignores it by default), cutting a
    checkpoint short; now the server drains: `drain` waits for the request in flight, within its bound."""
    _Held.entered.clear()
    _Held.release.clear()
    httpd = server.BoundedServer(("127.0.0.1", 0), _Held, max_connections=4)
    serving = threading.Thread(target=httpd.serve_forever, daemon=True)
    serving.start()
    answers: list[bytes] = []

    def ask() -> None:
        with socket.create_connection(httpd.server_address[:2], timeout=10) as conn:
            conn.sendall(b"GET / HTTP/1.1\r\nHost: agent\r\n\r\n")
            answers.append(conn.recv(1024))

    client = threading.Thread(target=ask)
    client.start()
    assert _Held.entered.wait(timeout=10)
    httpd.shutdown()  # what SIGTERM does: no new connection, the one in flight goes on
    serving.join(timeout=10)
    assert httpd.drain(0.2) is False  # still answering
    _Held.release.set()
    assert httpd.drain(10) is True
    client.join(timeout=10)
    httpd.server_close()
    assert answers and answers[0].startswith(b"HTTP/1.0 200"), answers


def test_sigterm_stops_the_agent() -> None:
    """The DaemonSet's container gets SIGTERM on every rollout, drain or uninstall: the agent stops at once."""
    import os
    import signal

    httpd = server.BoundedServer(("127.0.0.1", 0), _Held, max_connections=4)
    before = signal.getsignal(signal.SIGTERM)
    _Held.release.set()

    def terminate_once_serving() -> None:  # an answer means serve_forever runs: the handler is in place
        with socket.create_connection(httpd.server_address[:2], timeout=10) as conn:
            conn.sendall(b"GET / HTTP/1.1\r\nHost: agent\r\n\r\n")
            assert conn.recv(1024).startswith(b"HTTP/1.0 200")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=terminate_once_serving, daemon=True).start()
    started = time.monotonic()
    assert httpd.serve_until_terminated(drain_seconds=5) is True  # in this (the main) thread, as in __main__
    assert time.monotonic() - started < 5
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is the server's only while it serves
