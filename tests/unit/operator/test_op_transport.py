"""The operator's API requests: a timeout, Retry-After for the whole client, client-go's retries."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from agentsession_operator.kube import transport
from agentsession_operator.kube.api import ApiException


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _exc(status: int, retry_after: str | None = None) -> ApiException:
    exc = ApiException(status=status, reason="x")
    exc.headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return exc


def test_retry_after_parses_seconds_and_dates_and_caps() -> None:
    assert transport.retry_after(_exc(429, "2")) == 2.0
    assert transport.retry_after(_exc(429, "100000")) == transport.MAX_RETRY_AFTER
    assert transport.retry_after(_exc(429, "Thu, 01 Jan 1970 00:00:10 GMT"), now=lambda: 4.0) == 6.0
    assert transport.retry_after(_exc(429)) is None
    assert transport.retry_after(_exc(429, "soon")) is None


class Upstream:
    """A request function that fails with the given outcomes first, then answers; records send times."""

    def __init__(self, clock: Clock, outcomes: list[BaseException]) -> None:
        self.clock = clock
        self.outcomes = list(outcomes)
        self.sent: list[tuple[float, str, Any]] = []

    async def __call__(self, method: str, url: str, *, timeout: Any = None, **__: Any) -> str:
        self.sent.append((self.clock(), method, timeout))
        if self.outcomes:
            raise self.outcomes.pop(0)
        return "ok"


async def test_a_429_closes_the_gate_for_every_request_until_retry_after() -> None:
    clock = Clock()
    gate = transport.Gate(clock, clock.sleep)
    upstream = Upstream(clock, [_exc(429, "3")])
    send = transport.wrap(upstream, gate)
    assert await send("POST", "/claims") == "ok"
    assert [t for t, _, _ in upstream.sent] == [100.0, 103.0]  # sent again no sooner than Retry-After
    assert upstream.sent[0][2] == transport.REQUEST_TIMEOUT  # never without a timeout
    gate.close_for(2)
    other = Upstream(clock, [])
    assert await transport.wrap(other, gate)("GET", "/x") == "ok"
    assert other.sent[0][0] == 105.0  # another request waits for the gate too


async def test_a_500_is_retried_only_with_retry_after_and_other_errors_surface() -> None:
    clock = Clock()
    gate = transport.Gate(clock, clock.sleep)
    assert await transport.wrap(Upstream(clock, [_exc(503, "1")]), gate)("PATCH", "/s") == "ok"
    for exc in (_exc(500), _exc(409), _exc(422)):
        with pytest.raises(ApiException):
            await transport.wrap(Upstream(clock, [exc]), gate)("PATCH", "/s")


async def test_a_broken_get_is_sent_again_but_a_broken_write_is_not() -> None:
    clock = Clock()
    gate = transport.Gate(clock, clock.sleep)
    reset = aiohttp.ClientOSError(104, "Connection reset by peer")
    upstream = Upstream(clock, [reset, aiohttp.ServerDisconnectedError()])
    assert await transport.wrap(upstream, gate)("GET", "/s") == "ok"
    assert len(upstream.sent) == 3
    with pytest.raises(aiohttp.ClientOSError):
        await transport.wrap(Upstream(clock, [reset]), gate)("POST", "/claims")


async def test_gives_up_after_max_attempts() -> None:
    clock = Clock()
    gate = transport.Gate(clock, clock.sleep)
    upstream = Upstream(clock, [_exc(429, "1") for _ in range(transport.MAX_ATTEMPTS)])
    with pytest.raises(ApiException):
        await transport.wrap(upstream, gate)("GET", "/s")
    assert len(upstream.sent) == transport.MAX_ATTEMPTS


@pytest.mark.parametrize(
    ("method", "url", "kind"),
    [
        (
            "GET",
            "https://h:6443/apis/agentsession.dev/v1alpha1/namespaces/ns/agentsessions/s",
            ("agentsessions", "get"),
        ),
        ("GET", "https://h/apis/agentsession.dev/v1alpha1/agentsessions?limit=500", ("agentsessions", "list")),
        ("GET", "https://h/apis/agentsession.dev/v1alpha1/agentsessions?watch=True", ("agentsessions", "watch")),
        (
            "PATCH",
            "https://h/apis/agentsession.dev/v1alpha1/namespaces/ns/agentsessions/s/status",
            ("agentsessions/status", "patch"),
        ),
        (
            "GET",
            "https://h/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/ns/sandboxwarmpools/p",
            ("sandboxwarmpools", "get"),
        ),
        ("GET", "https://h/api/v1/namespaces/agent-sandbox-system/configmaps/c", ("configmaps", "get")),
        ("POST", "https://h/api/v1/namespaces/ns/serviceaccounts/sa/token", ("serviceaccounts/token", "create")),
        ("PUT", "https://h/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", ("leases", "update")),
        (
            "DELETE",
            "https://h/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/ns/sandboxclaims/c",
            ("sandboxclaims", "delete"),
        ),
        (
            "DELETE",
            "https://h/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/ns/sandboxclaims",
            ("sandboxclaims", "deletecollection"),
        ),
        ("POST", "https://h/apis/authentication.k8s.io/v1/tokenreviews", ("tokenreviews", "create")),
        ("GET", "https://h/api/v1/namespaces/ns", ("namespaces", "get")),
        ("GET", "https://h/version", ("", "get")),
    ],
)
def test_every_request_is_named_by_resource_and_verb(method: str, url: str, kind: tuple[str, str]) -> None:
    """Issue 53 item 2: agentsession_api_requests_total counts what the operator costs the API server."""
    assert transport.request_kind(method, url) == kind


async def test_each_attempt_is_counted() -> None:
    from agentsession_operator.infra import metrics

    clock = Clock()
    upstream = Upstream(clock, [_exc(429, "1")])  # refused once, then answered: two attempts
    send = transport.wrap(upstream, transport.Gate(clock, clock.sleep))
    counter = metrics.API_REQUESTS.labels("sandboxwarmpools", "get")
    before = counter._value.get()
    await send("GET", "https://h/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/ns/sandboxwarmpools/p")
    assert counter._value.get() - before == 2
