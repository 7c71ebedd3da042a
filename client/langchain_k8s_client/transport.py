"""The transport to a pod's python runtime: endpoint, retries, sync and async drivers.

`RuntimeTransport` runs the sans-IO operations of `runtime.RuntimeProtocol` over
the keep-alive HTTP/1.1 transport of `http11` (httpx requests and responses, sent
straight to the transport: the `httpx.Client` layer cost 0.1 to 0.25 ms a call),
one for the sync API and one per event loop for the async API (its connections
belong to the loop that opened them). A caller's own `httpx.Client` is used
instead when given. The reconnection rule is one flow (see `flows`) that runs the
sans-IO operations inside it directly (`yield from`): the sync driver sends each
request with `_send`, the async one with `_asend` (one request and its retries;
`_Attempts` decides when to retry, they only send and wait), so one trampoline
stands between an operation and the socket.

Rules:
- Idempotent requests (probe, health, download, listings) are retried on
  connection errors and 502/503/504 with bounded, jittered backoff.
- A command or a write is never sent twice: a transport failure after it may
  have reached the runtime raises `TransportError` (`maybe_delivered=True`).
  Only a request that provably never left (connection refused or timed out while
  connecting, e.g. the pod was suspended or replaced) is sent once more, to the
  endpoint `resolve_endpoint` returns.
- Before the first operation on a connection the runtime is probed and its pod
  name checked (`WrongPod`). With `resolve_endpoint`, a connection that fails
  (or a read that fails) asks for the current endpoint once and tries again;
  after a failed command or write the next operation re-resolves first.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import urlsplit

import httpx

from .commands import CommandResult
from .errors import TransportError, WrongPod
from .flows import Call, Flow, run_async, run_sync
from .http11 import AsyncPodHTTPTransport, PodHTTPTransport
from .limits import ResponseLimits, aread_bounded, read_bounded
from .pod_identity import PodIdentity
from .probe import RuntimeInfo
from .protocol import (
    ACCEPT_ENCODING_HEADER,
    CONNECT_TIMEOUT,
    CONTENT_TYPE_HEADER,
    DEFAULT_MAX_RESPONSE_BYTES,
    GATEWAY_STATUSES,
    IDENTITY,
    JSON_CONTENT_TYPE,
    RETRY_ATTEMPTS,
    RETRY_BASE_DELAY,
    RETRY_JITTER,
    RETRY_MAX_DELAY,
    UPLOAD_CONTENT_TYPE,
    UPLOAD_FIELD,
)
from .router_credentials import RouterCredentials
from .runtime import Downloaded, Op, RuntimeProtocol
from .wire import HttpRequest, HttpResponse, RuntimeExec

T = TypeVar("T")


@dataclass(frozen=True)
class PodEndpoint:
    """Where a pod's runtime answers.

    `base_url`: e.g. `http://10.0.3.7:8888` (pod IP) or the router's URL.
    `headers`: sent with every request (router mode: `X-Sandbox-ID`,
    `X-Sandbox-Namespace`, `X-Sandbox-Port`).
    `expected_hostname`: the pod name; checked on every (re)connection when set.
    `expected_ips`: the pod's IPs as the API has them (the session's status.podIPs); the pod reached must
    hold one of them (names are unique only within a namespace, IPs in the cluster).
    `identity`: the identity token the pod must show before it is sent anything (`pod_identity`); None: its
    name and addresses alone are checked.
    `credentials`: router mode with the operator's issuer: each request carries its own token
    (`router_credentials`); None: no Authorization header.
    """

    base_url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    expected_hostname: str | None = None
    expected_ips: tuple[str, ...] = ()
    identity: PodIdentity | None = None
    credentials: RouterCredentials | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"base_url must be an http(s) URL, got {self.base_url!r}")
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        object.__setattr__(self, "headers", dict(self.headers))
        object.__setattr__(self, "expected_ips", tuple(self.expected_ips))


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff for idempotent requests."""

    attempts: int = RETRY_ATTEMPTS
    base_delay: float = RETRY_BASE_DELAY
    max_delay: float = RETRY_MAX_DELAY

    def delay(self, retry: int) -> float:
        low, high = RETRY_JITTER
        return min(self.max_delay, self.base_delay * (2**retry)) * (low + random.random() * (high - low))


class _Attempts:
    """Retry bookkeeping for one request; decides, the drivers wait."""

    def __init__(self, policy: RetryPolicy, request: HttpRequest) -> None:
        self.policy = policy
        self.request = request
        self.retry = 0

    def after_error(self, exc: httpx.TransportError) -> float:
        """Delay before the next attempt, or raise TransportError when giving up."""
        not_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
        error = TransportError(
            f"{self.request.method} {self.request.path}: {type(exc).__name__}: {exc}", maybe_delivered=not not_sent
        )
        # A read timeout means the runtime is alive but slow: waiting again would only double the wait.
        if not self.request.idempotent or isinstance(exc, httpx.ReadTimeout) or not self._more():
            raise error from exc
        return self._next_delay()

    def after_response(self, status: int) -> float | None:
        """None to accept the response, else the delay before retrying it."""
        if status not in GATEWAY_STATUSES:
            return None
        if not self.request.idempotent or not self._more():
            raise TransportError(f"{self.request.method} {self.request.path}: gateway answered HTTP {status}")
        return self._next_delay()

    def _more(self) -> bool:
        return self.retry + 1 < self.policy.attempts

    def _next_delay(self) -> float:
        delay = self.policy.delay(self.retry)
        self.retry += 1
        return delay


def _headers(endpoint: PodEndpoint, req: HttpRequest, token: str | None) -> dict[str, str]:
    headers = {
        name: value for name, value in endpoint.headers.items() if name.lower() != ACCEPT_ENCODING_HEADER.lower()
    }
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    # No compression: `limits` refuses any other coding (a decoder expands before max_bytes can count).
    headers[ACCEPT_ENCODING_HEADER] = IDENTITY
    if req.json_body is not None:
        headers[CONTENT_TYPE_HEADER] = JSON_CONTENT_TYPE
    return headers


def _build(
    client: httpx.Client | httpx.AsyncClient, endpoint: PodEndpoint, req: HttpRequest, token: str | None
) -> httpx.Request:
    timeout = httpx.Timeout(CONNECT_TIMEOUT, read=req.read_timeout, write=req.read_timeout, pool=req.read_timeout)
    url = endpoint.base_url + req.path
    headers = _headers(endpoint, req, token)
    if req.upload is not None:
        name, content = req.upload
        files = {UPLOAD_FIELD: (name, content, UPLOAD_CONTENT_TYPE)}
        return client.build_request(req.method, url, files=files, headers=headers, timeout=timeout)
    return client.build_request(req.method, url, content=req.json_body, headers=headers, timeout=timeout)


def _request(endpoint: PodEndpoint, req: HttpRequest, token: str | None) -> httpx.Request:
    """`_build` without an httpx.Client: the same request, for the transport itself."""
    read = req.read_timeout
    timeout = {"connect": CONNECT_TIMEOUT, "read": read, "write": read, "pool": read}
    url = endpoint.base_url + req.path
    headers = _headers(endpoint, req, token)
    if req.upload is not None:
        name, content = req.upload
        files = {UPLOAD_FIELD: (name, content, UPLOAD_CONTENT_TYPE)}
        return httpx.Request(req.method, url, files=files, headers=headers, extensions={"timeout": timeout})
    return httpx.Request(req.method, url, content=req.json_body, headers=headers, extensions={"timeout": timeout})


class RuntimeTransport:
    """Sync and async access to one pod's runtime (see the module docstring)."""

    def __init__(
        self,
        endpoint: PodEndpoint,
        *,
        retry: RetryPolicy | None = None,
        resolve_endpoint: Callable[[], PodEndpoint] | None = None,
        client: httpx.Client | None = None,
        async_client_factory: Callable[[], httpx.AsyncClient] | None = None,
        limits: ResponseLimits | None = None,
        http: httpx.BaseTransport | None = None,
        async_http_factory: Callable[[], httpx.AsyncBaseTransport] | None = None,
    ) -> None:
        self._endpoint = endpoint
        self._limits = limits or ResponseLimits()
        self._protocol = RuntimeProtocol(endpoint.expected_hostname, endpoint.expected_ips, endpoint.identity)
        self._retry = retry or RetryPolicy()
        self._resolve_endpoint = resolve_endpoint
        self._stale = False
        # The pod's own HTTP/1.1 transport (http11): 0.2 ms less per request than httpcore's, and
        # 0.1 to 0.25 ms more without the httpx.Client layer (a caller's own client keeps it).
        self._client = client
        self._http = http or PodHTTPTransport()
        self._async_client_factory = async_client_factory
        self._async_http_factory = async_http_factory or AsyncPodHTTPTransport
        self._aclients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, httpx.AsyncClient | httpx.AsyncBaseTransport
        ] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    # -- state -----------------------------------------------------------------------

    @property
    def endpoint(self) -> PodEndpoint:
        return self._endpoint

    @property
    def limits(self) -> ResponseLimits:
        return self._limits

    @property
    def info(self) -> RuntimeInfo | None:
        """What the last probe learned; None before connecting or after `invalidate()`."""
        return self._protocol.info

    def set_endpoint(self, endpoint: PodEndpoint) -> None:
        """Point at another endpoint; the next operation probes and checks identity."""
        with self._lock:
            self._endpoint = endpoint
            self._protocol = RuntimeProtocol(endpoint.expected_hostname, endpoint.expected_ips, endpoint.identity)
            self._stale = False

    def set_limits(self, limits: ResponseLimits) -> None:
        """Bound every later answer by `limits`."""
        self._limits = limits

    def invalidate(self) -> None:
        """Forget the probe (the pod may have changed); the next operation reconnects."""
        self._protocol.invalidate()

    @property
    def stale(self) -> bool:
        """Whether the next operation resolves the endpoint first (`mark_stale`)."""
        return self._stale

    def mark_stale(self) -> None:
        """Ask for `resolve_endpoint` before the next operation (the caller's signal)."""
        self._stale = True
        self._protocol.invalidate()

    # -- one request, with retries (`_Attempts` decides; these two only send and wait) --

    def _send(self, req: HttpRequest) -> HttpResponse:
        attempts = _Attempts(self._retry, req)
        while True:
            try:
                resp = self._send_once(req)
            except httpx.TransportError as exc:
                time.sleep(attempts.after_error(exc))
                continue
            delay = attempts.after_response(resp.status)
            if delay is None:
                return resp
            time.sleep(delay)

    async def _asend(self, req: HttpRequest) -> HttpResponse:
        attempts = _Attempts(self._retry, req)
        while True:
            try:
                resp = await self._asend_once(req)
            except httpx.TransportError as exc:
                await asyncio.sleep(attempts.after_error(exc))
                continue
            delay = attempts.after_response(resp.status)
            if delay is None:
                return resp
            await asyncio.sleep(delay)

    # Bounded reads (limits.py): a hostile pod can neither fill memory nor trickle forever.
    def _send_once(self, req: HttpRequest) -> HttpResponse:
        client, endpoint = self._client, self._endpoint
        creds = endpoint.credentials
        token = creds.grant(req.method, req.path).token if creds is not None else None
        if client is not None:
            request = _build(client, endpoint, req, token)
            return read_bounded(lambda r: client.send(r, stream=True), request, req, self._limits)
        return read_bounded(self._http.handle_request, _request(endpoint, req, token), req, self._limits)

    async def _asend_once(self, req: HttpRequest) -> HttpResponse:
        sender, endpoint = self._aclient(), self._endpoint
        creds = endpoint.credentials
        token = (await creds.agrant(req.method, req.path)).token if creds is not None else None
        if isinstance(sender, httpx.AsyncClient):
            client = sender
            request = _build(client, endpoint, req, token)
            return await aread_bounded(lambda r: client.send(r, stream=True), request, req, self._limits)
        return await aread_bounded(sender.handle_async_request, _request(endpoint, req, token), req, self._limits)

    def _aclient(self) -> httpx.AsyncClient | httpx.AsyncBaseTransport:
        loop = asyncio.get_running_loop()
        sender = self._aclients.get(loop)
        if sender is None:
            factory = self._async_client_factory or self._async_http_factory
            sender = self._aclients[loop] = factory()
        return sender

    # -- the reconnection rule, written once (flows.run_sync / run_async drive it; the runtime's
    # sans-IO operations are `yield from` here, their requests go to `_send` / `_asend`) ----------

    def _run_flow(self, make_op: Callable[[RuntimeProtocol], Op[T]], *, idempotent: bool) -> Flow[T]:
        yield from self._connect_flow()
        try:
            return (yield from make_op(self._protocol))
        except TransportError as exc:
            if not (self._resolve_endpoint and (idempotent or not exc.maybe_delivered)):
                self._after_failure()
                raise
        # A read, or anything that provably never reached the pod (connection refused: the pod was
        # suspended or replaced), may be sent again: ask where the pod is now and try once more.
        self._reresolve((yield self._resolve_call()))
        yield from self._connect_flow()
        try:
            return (yield from make_op(self._protocol))
        except TransportError:
            self._after_failure()
            raise

    def _connect_flow(self) -> Flow[None]:
        if self._stale and self._resolve_endpoint:
            self._reresolve((yield self._resolve_call()))
        if self._protocol.info is not None:
            return
        try:
            yield from self._protocol.connect()
        except (TransportError, WrongPod):
            if not self._resolve_endpoint:
                raise
            self._reresolve((yield self._resolve_call()))
            yield from self._protocol.connect()

    def _resolve_call(self) -> Call:
        # A sync `resolve_endpoint` (it may read the cluster) runs in a worker thread under the async API.
        assert self._resolve_endpoint is not None
        return Call(self._resolve_endpoint, self._aresolve_endpoint)

    async def _aresolve_endpoint(self) -> PodEndpoint:
        assert self._resolve_endpoint is not None
        return await asyncio.to_thread(self._resolve_endpoint)

    def run(self, make_op: Callable[[RuntimeProtocol], Op[T]], *, idempotent: bool) -> T:
        """Connect if needed, then run `make_op(protocol)` with the reconnection rule."""
        return run_sync(self._run_flow(make_op, idempotent=idempotent), self._send)

    async def arun(self, make_op: Callable[[RuntimeProtocol], Op[T]], *, idempotent: bool) -> T:
        return await run_async(self._run_flow(make_op, idempotent=idempotent), self._asend)

    def _connect(self) -> None:
        run_sync(self._connect_flow(), self._send)

    async def _aconnect(self) -> None:
        await run_async(self._connect_flow(), self._asend)

    def _reresolve(self, endpoint: PodEndpoint) -> None:
        self.set_endpoint(endpoint)

    def _after_failure(self) -> None:
        # The command or write is not re-sent; the next operation reconnects
        # (re-resolving the endpoint when possible) before doing anything.
        if self._resolve_endpoint:
            self._stale = True
        self._protocol.invalidate()

    # -- public operations (thin: each is a sans-IO op in RuntimeProtocol) ------------

    def check_identity(self) -> RuntimeInfo:
        """Probe now and verify the pod name; raises WrongPod on a mismatch."""
        self._protocol.invalidate()
        self._connect()
        return self._require_info()

    async def acheck_identity(self) -> RuntimeInfo:
        self._protocol.invalidate()
        await self._aconnect()
        return self._require_info()

    def _require_info(self) -> RuntimeInfo:
        info = self._protocol.info
        if info is None:
            raise TransportError("the connection was reset while probing; try again", maybe_delivered=False)
        return info

    def health(self) -> bool:
        """`GET /` answered 200 (retried like any idempotent request)."""
        return run_sync(self._protocol.health(), self._send)

    async def ahealth(self) -> bool:
        return await run_async(self._protocol.health(), self._asend)

    def execute(self, command: str, *, timeout: int, max_output: int, cwd: str = "") -> CommandResult:
        return self.run(lambda p: p.execute(command, timeout=timeout, max_output=max_output, cwd=cwd), idempotent=False)

    async def aexecute(self, command: str, *, timeout: int, max_output: int, cwd: str = "") -> CommandResult:
        return await self.arun(
            lambda p: p.execute(command, timeout=timeout, max_output=max_output, cwd=cwd), idempotent=False
        )

    def upload(self, items: list[tuple[str, bytes, str]]) -> list[str | None]:
        """Write (absolute path, content, confinement root or "") items; None per success."""
        return self.run(lambda p: p.upload(items), idempotent=False)

    async def aupload(self, items: list[tuple[str, bytes, str]]) -> list[str | None]:
        return await self.arun(lambda p: p.upload(items), idempotent=False)

    def download(self, items: list[tuple[str, str]]) -> list[Downloaded]:
        """Read (absolute path, confinement root or "") items."""
        return self.run(lambda p: p.download(items), idempotent=True)

    async def adownload(self, items: list[tuple[str, str]]) -> list[Downloaded]:
        return await self.arun(lambda p: p.download(items), idempotent=True)

    def script(self, command: str, *, idempotent: bool, read_timeout: float | None = None) -> RuntimeExec:
        """Run an internal, fully quoted runtime command (no wrapper) and return its raw answer."""
        return self.run(
            lambda p: p.script(command, idempotent=idempotent, read_timeout=read_timeout), idempotent=idempotent
        )

    async def ascript(self, command: str, *, idempotent: bool, read_timeout: float | None = None) -> RuntimeExec:
        return await self.arun(
            lambda p: p.script(command, idempotent=idempotent, read_timeout=read_timeout), idempotent=idempotent
        )

    def staged_script(self, content: bytes, build: Callable[[str], str]) -> RuntimeExec:
        """Stage `content` in the pod, then run the command `build(staged_path)`; never retried."""
        return self.run(lambda p: p.staged_script(content, build), idempotent=False)

    async def astaged_script(self, content: bytes, build: Callable[[str], str]) -> RuntimeExec:
        return await self.arun(lambda p: p.staged_script(content, build), idempotent=False)

    def runtime_info(self) -> RuntimeInfo:
        """Connect if needed and return what the probe learned."""
        self._connect()
        return self._require_info()

    async def aruntime_info(self) -> RuntimeInfo:
        await self._aconnect()
        return self._require_info()

    # -- lifecycle -------------------------------------------------------------------

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        self._http.close()

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        sender = self._aclients.pop(loop, None)
        if sender is not None:
            await sender.aclose()


__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "PodEndpoint", "ResponseLimits", "RetryPolicy", "RuntimeTransport"]
