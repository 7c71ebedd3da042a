"""How every request of the operator's own API client is sent: a timeout, Retry-After, and client-go's retries.

A request without a timeout (kubernetes_asyncio's, before kube/api.py) let an API server (or a middlebox)
that accepts a request and never answers hold a session's pass, and its lock, for good. And a 429 failed
the pass, which was retried after 1 s whatever Retry-After said.

Wrapped around `ApiClient.request` (kube/api.py: every call goes through it):

- each request has a total timeout (REQUEST_TIMEOUT unless the caller gives one);
- a 429 (or a 5xx carrying Retry-After) closes a gate for the whole client until Retry-After has
  passed (capped), and the request is sent again then: the API server's flow control throttles the
  client, not one request, so no request of ours goes out before the time it asked for;
- a GET whose connection broke (reset, closed, timed out) is sent again after a short backoff;
- a write made under a leadership hold (kube/election/hold.py: `bind`) is sent only while the hold lasts, checked
  before every attempt and after every wait, with the rest of the hold as its timeout on both sides; a
  gate that opens after the hold ends refuses it at once (NotLeader).

Every attempt is counted by resource and verb (`agentsession_api_requests_total`, issue 53 item 2): what
a take-over or a pass costs the API server, warm pools and ConfigMaps included.

Everything else surfaces to the caller (a pass fails and is retried with its own backoff): a 500
without Retry-After or a broken write may have been applied, and only the pass knows whether doing it
again is safe (claim names are deterministic, so it is, through a 409).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

import agentsession_operator.kube.election.hold as holds
from agentsession_operator.infra import metrics
from agentsession_operator.infra.logs import logger
from agentsession_operator.kube.api import ApiClient, ApiException

REQUEST_TIMEOUT = 30.0  # seconds, the whole exchange (kopf's own requests: settings.networking)
MAX_RETRY_AFTER = 30.0  # an absurd Retry-After must not park the operator
DEFAULT_RETRY_AFTER = 1.0  # a 429 without the header
MAX_ATTEMPTS = 5
GET_RETRY_BACKOFF = 0.2  # doubled per attempt

_log = logger()


def retry_after(exc: ApiException, now: Callable[[], float] = time.time) -> float | None:
    """Seconds the server asked us to wait (Retry-After as seconds or an HTTP date), capped; else None."""
    value = str((getattr(exc, "headers", None) or {}).get("Retry-After") or "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - now()
        except (TypeError, ValueError):
            return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


class Gate:
    """Closed until a time on the monotonic clock: every request waits for it to open."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.clock = clock
        self.sleep = sleep
        self.not_before = 0.0

    def close_for(self, seconds: float) -> None:
        self.not_before = max(self.not_before, self.clock() + seconds)

    async def wait(self) -> None:
        while (remaining := self.not_before - self.clock()) > 0:
            await self.sleep(remaining)


_BROKEN = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError, ConnectionError)


_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def request_kind(method: str, url: str) -> tuple[str, str]:
    """(resource, verb) of a request, as the API server's audit names them: the resource's plural (with
    "/subresource"), "" for a path that names none (discovery, /version)."""
    path, _, query = url.partition("?")
    parts = [p for p in urllib.parse.urlsplit(path).path.split("/") if p]
    if parts[:1] == ["api"]:
        rest = parts[2:]  # core group: /api/v1/...
    elif parts[:1] == ["apis"]:
        rest = parts[3:]  # /apis/group/version/...
    else:
        return "", method.lower()
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]  # namespaced: the namespace's objects (a namespace itself keeps rest as is)
    resource = "/".join([rest[0], *rest[2:3]]) if rest else ""
    named = len(rest) > 1
    if method == "GET":
        verb = "watch" if "watch=true" in query.lower() else "get" if named else "list"
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    return resource, verb


def wrap(
    request: Callable[..., Awaitable[Any]], gate: Gate, default_timeout: float = REQUEST_TIMEOUT
) -> Callable[..., Any]:
    """`request` (ApiClient.request's signature) sent with the rules above."""

    def should_retry(exc: ApiException, method: str, attempt: int) -> bool:
        """A 429, or a 5xx carrying Retry-After: the gate closes for the time asked, and the request goes again."""
        wait = retry_after(exc)
        status = int(exc.status or 0)
        if status == 429 and wait is None:
            wait = DEFAULT_RETRY_AFTER
        if wait is None or not (status == 429 or status >= 500) or attempt >= MAX_ATTEMPTS:
            return False
        metrics.API_RETRIES.labels(reason=str(status)).inc()
        _log.info("API server asked to retry later", status=status, retry_after=wait, method=method)
        gate.close_for(wait)
        return True

    async def send(method: str, url: str, *, timeout: float | None = None, **kwargs: Any) -> Any:
        hold_of = holds.bound() if method != "GET" else None
        lease: str | None = None
        term = 0
        attempt = 0
        while True:
            attempt += 1
            limit = timeout or default_timeout
            sent = kwargs
            if hold_of is not None:
                held = holds.check(hold_of, lease, gate.clock())
                lease = held.lease
                if gate.not_before - gate.clock() >= held.remaining(gate.clock()):
                    raise holds.NotLeader(f"the API server asked to wait past the hold of Lease {lease}")
            await gate.wait()
            if hold_of is not None:
                held = holds.check(hold_of, lease, gate.clock())  # after the wait: lost, or now too short
                term = held.term
                remaining = held.remaining(gate.clock())
                limit = min(limit, remaining)
                deadline = ("timeout", holds.server_timeout(remaining))
                sent = {**kwargs, "query": [*(kwargs.get("query") or ()), deadline]}
            if lease is not None:
                metrics.HELD_WRITES.labels(lease=lease, term=str(term)).inc()
            metrics.API_REQUESTS.labels(*request_kind(method, url)).inc()
            try:
                with holds.IN_FLIGHT.writing(lease) if lease is not None else contextlib.nullcontext():
                    return await request(method, url, timeout=limit, **sent)
            except ApiException as exc:
                if not should_retry(exc, method, attempt):
                    raise
            except _BROKEN as exc:
                if method != "GET" or attempt >= MAX_ATTEMPTS:
                    raise
                metrics.API_RETRIES.labels(reason=type(exc).__name__).inc()
                await gate.sleep(GET_RETRY_BACKOFF * 2 ** (attempt - 1))

    return send


def install(api_client: ApiClient, gate: Gate | None = None, timeout: float = REQUEST_TIMEOUT) -> Gate:
    """Route every request of `api_client` through `wrap`."""
    gate = gate or Gate()
    api_client.request = wrap(api_client.request, gate, timeout)  # type: ignore[method-assign]
    return gate
