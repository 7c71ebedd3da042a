"""The agent's HTTP interface: three requests, each authenticated (TokenReview) and authorized (one identity).

- ``POST /v1/checkpoint`` ``{"namespace", "pod", "name", "restoreInto", "maxBytes"}``: checkpoint that pod's
  sandbox into ``<root>/<namespace>/<name>``, restorable only into pod ``restoreInto`` (default: ``pod``);
  answers ``{"sizeBytes", "seconds"}``, 404 when the pod is not on this node, 413 ``{"error", "measuredBytes",
  "maxBytes"}`` when the sandbox holds more memory than ``maxBytes`` (nothing written; without ``maxBytes``,
  an older operator's request, the memory is not measured).
- ``POST /v1/delete`` ``{"namespace", "name"}``: delete that image; answers ``{"deleted": bool,
  "restoreFailed": str | null}``, the latter the shim's record of a restore from it that failed (the pod
  then started fresh), deleted with it.
- ``POST /v1/list`` ``{}``: the images on this node, ``{"images": [{"namespace", "name"}]}`` (at most
  images.MAX_LISTED): the operator's sweep deletes those whose session is gone.

Anything else is 404; a caller that is not the operator 401/403 before the body is read; a connection past
MAX_CONNECTIONS 503 at once, unread (closed at once, unanswered, over TLS: an answer needs a handshake).

The shipped agent serves TLS only (``__main__``: a certificate the operator signed for this node, so the
operator sends its token to no one else); ``serve`` without a context is plain HTTP, for tests of the rest.
"""

from __future__ import annotations

import io
import json
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentsession_nodeagent import authz, checkpointer, images

MAX_BODY = 4096
BUSY_CHECKPOINTING = "busy: this node's agent is taking another checkpoint; ask again"
Review = Callable[[str, str], dict[str, Any]]


class Agent:
    def __init__(self, node: checkpointer.Node, review: Review, allowed_user: str, audience: str = authz.AUDIENCE):
        self.node = node
        self.review = review
        self.allowed_user = allowed_user
        self.audience = audience
        self.lock = threading.Lock()  # one checkpoint at a time on a node: they are memory-heavy
        # A killed agent's half-written images (issue 49 item 3): none is being written by this one yet.
        self.partials_swept = images.sweep_partials(node.checkpoint_root)

    def authorize(self, header: str | None) -> tuple[HTTPStatus, str]:
        token = authz.bearer_token(header)
        if token is None:
            return HTTPStatus.UNAUTHORIZED, "a bearer token is required"
        try:
            answer = self.review(token, self.audience)
        except Exception as e:  # the API server unreachable: refuse, never act unauthenticated
            return HTTPStatus.SERVICE_UNAVAILABLE, f"TokenReview failed: {type(e).__name__}"
        verdict = authz.judge(answer, self.allowed_user, self.audience)
        if not verdict.allowed:
            return HTTPStatus.FORBIDDEN, verdict.why
        return HTTPStatus.OK, verdict.why

    def handle(self, path: str, body: dict[str, Any]) -> tuple[HTTPStatus, dict[str, Any]]:
        namespace, name = str(body.get("namespace", "")), str(body.get("name", ""))
        if path == "/v1/checkpoint":
            bound = body.get("maxBytes")
            if bound is not None and (not isinstance(bound, int) or isinstance(bound, bool) or bound < 0):
                raise images.RequestError(f"maxBytes must be a number of bytes, got {bound!r}")
            if not self.lock.acquire(blocking=False):
                # Answered at once, not queued on the lock: the caller holds no connection (and no wait) for
                # another checkpoint's whole time, and asks again when it likes (issue 49 item 4).
                return HTTPStatus.SERVICE_UNAVAILABLE, {"error": BUSY_CHECKPOINTING, "busy": True}
            try:
                taken = checkpointer.checkpoint(
                    self.node, namespace, str(body.get("pod", "")), name, str(body.get("restoreInto", "")), bound
                )
            finally:
                self.lock.release()
            return HTTPStatus.OK, {"sizeBytes": taken.size_bytes, "seconds": round(taken.seconds, 3)}
        if path == "/v1/delete":
            deleted, failure = images.delete(self.node.checkpoint_root, namespace, name)
            return HTTPStatus.OK, {"deleted": deleted, "restoreFailed": failure}
        if path == "/v1/list":
            listed = images.listing(self.node.checkpoint_root)
            return HTTPStatus.OK, {"images": [{"namespace": ns, "name": n} for ns, n in listed]}
        return HTTPStatus.NOT_FOUND, {"error": "no such request"}


SOCKET_TIMEOUT = 30.0
"""Seconds the whole request (line, header, body) may take to arrive from the connection's start, and a write
of the answer: a caller that sends nothing, or a byte at a time, is dropped, not served by a thread for ever
(issue 49 item 5). A checkpoint's own time (runsc, up to Node.timeout) is not a socket wait."""


class DeadlineReader(io.RawIOBase):
    """A connection's bytes, each read waiting only what is left of the request's time: a per-read timeout
    alone restarts at every byte, so a client dripping its request held the thread as long as it liked."""

    def __init__(self, connection: socket.socket, deadline: float) -> None:
        self.connection = connection
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive within the agent's socket timeout")
        self.connection.settimeout(left)
        return self.connection.recv_into(buffer)


def handler_for(agent: Agent, socket_timeout: float = SOCKET_TIMEOUT) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = socket_timeout  # StreamRequestHandler sets it on the connection

        def setup(self) -> None:
            context = getattr(self.server, "context", None)
            if context is not None:
                # The handshake in this connection's thread, within the socket timeout: never in the accept loop.
                self.request.settimeout(socket_timeout)
                self.request = context.wrap_socket(self.request, server_side=True)
            super().setup()
            # The request is read through a deadline of its own (the whole request within socket_timeout);
            # a TimeoutError there is handle_one_request's: the connection is closed, nothing answered.
            self.rfile.close()  # the socket's makefile: an open one would keep the connection from closing
            self.rfile = io.BufferedReader(DeadlineReader(self.connection, time.monotonic() + socket_timeout))

        def finish(self) -> None:
            super().finish()
            if isinstance(self.request, ssl.SSLSocket):  # the server closes the socket it accepted, now detached
                self.request.close()

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: HTTPStatus, body: dict[str, Any]) -> None:
            self.connection.settimeout(socket_timeout)  # the answer's writes: their own timeout, not what is left
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._answer(HTTPStatus.OK, {"ok": True})
            else:
                self._answer(HTTPStatus.NOT_FOUND, {"error": "no such request"})

        def do_POST(self) -> None:
            status, why = agent.authorize(self.headers.get("Authorization"))
            if status != HTTPStatus.OK:
                self._answer(status, {"error": why})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._answer(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "body too large"})
                return
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("not an object")
                answer = agent.handle(self.path, body)
            except checkpointer.NotGVisor as e:
                answer = HTTPStatus.CONFLICT, {"error": str(e)}
            except (images.RequestError, ValueError) as e:
                answer = HTTPStatus.BAD_REQUEST, {"error": str(e)}
            except checkpointer.NotOnThisNode as e:
                answer = HTTPStatus.NOT_FOUND, {"error": str(e)}
            except checkpointer.OverBound as e:
                answer = (
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    {
                        "error": str(e),
                        "measuredBytes": e.measured,
                        "maxBytes": e.bound,
                    },
                )
            except checkpointer.NodeFull as e:
                answer = HTTPStatus.INSUFFICIENT_STORAGE, {"error": str(e)}
            except checkpointer.CheckpointError as e:
                answer = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(e)}
            self._answer(*answer)

    return Handler


MAX_CONNECTIONS = 32
"""Connections the agent serves at once (a thread each, for at most SOCKET_TIMEOUT while the request comes in).
The operator sends one checkpoint per node at a time, plus a delete or a listing: far below. Past it, a
connection is answered 503 at once, unread, so a pod that opens connections by the hundred holds at most
this many threads, each for at most SOCKET_TIMEOUT (issue 49 item 5)."""


class BoundedServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` of them; any other connection is answered busy."""

    daemon_threads = True  # a stuck connection never holds the process at exit

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        max_connections: int,
        context: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(address, handler)
        self.max_connections = max_connections
        self.context = context
        """TLS for every new connection (replaced whole when the certificate is renewed); None: plain HTTP."""
        self._active = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

    def process_request(self, request: Any, client_address: Any) -> None:
        # The accept loop's thread: counted here, before the connection's own thread starts.
        with self._lock:
            busy = self._active >= self.max_connections
            if not busy:
                self._active += 1
        if busy:
            self._answer_busy(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def _release(self) -> None:
        with self._lock:
            self._active -= 1
            self._idle.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait at most `timeout` s for the connections in flight (a checkpoint being written) to finish;
        False if some still run. Call it after serve_forever returned: nothing new is accepted then."""
        with self._idle:
            return self._idle.wait_for(lambda: self._active == 0, timeout)

    def serve_until_terminated(self, drain_seconds: float) -> bool:
        """Serve until SIGTERM (the kubelet stopping the pod), then let the requests in flight finish for at
        most `drain_seconds` and close. As a container's PID 1, Python ignored SIGTERM: every stop of the
        agent (a rollout, a node drain, an uninstall) waited out the pod's whole grace period and killed a
        checkpoint half written. Main thread only (signal handlers); True if nothing was cut short."""
        import signal

        def stop(signum: int, frame: object) -> None:
            # shutdown() waits for serve_forever's loop, which runs in this very thread: from another one.
            threading.Thread(target=self.shutdown, name="sigterm", daemon=True).start()

        previous = signal.signal(signal.SIGTERM, stop)
        try:
            self.serve_forever()
            return self.drain(drain_seconds)
        finally:
            signal.signal(signal.SIGTERM, previous)
            self.server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A failed handshake or a dropped connection is the caller's; anything else is printed."""
        if not isinstance(sys.exc_info()[1], (ssl.SSLError, OSError)):
            super().handle_error(request, client_address)

    def _answer_busy(self, request: socket.socket) -> None:
        if self.context is not None:  # no plain answer on a TLS port: closed at once
            self.shutdown_request(request)
            return
        body = json.dumps(
            {
                "error": f"busy: the node agent serves {self.max_connections} connections at once; try again",
                "busy": True,
            }
        ).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
        ).encode()
        try:
            request.setblocking(False)  # a short answer into the socket's buffer; never a wait in the accept loop
            request.send(head + body)
        except OSError:
            pass
        self.shutdown_request(request)


def serve(
    agent: Agent,
    host: str,
    port: int,
    socket_timeout: float = SOCKET_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
    context: ssl.SSLContext | None = None,
) -> BoundedServer:
    return BoundedServer((host, port), handler_for(agent, socket_timeout), max_connections, context)
