"""Router credentials in the client (issue 51 item 2): asked for together, kept until shortly before they
expire, one per download path, and the bearer token taken from the API client."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from langchain_k8s_client.router_credentials import (
    FIXED,
    RENEW_MARGIN,
    Grant,
    IssuerLocation,
    RouterCredentials,
    bearer_of,
)

NOW = 1_000_000.0


class Counting(RouterCredentials):
    def __init__(self, clock: Any) -> None:
        super().__init__(IssuerLocation("https://127.0.0.1:1", ""), lambda: "t", "team-a", "s", 8888, clock=clock)
        self.calls: list[list[tuple[str, str]]] = []

    def _ask(self, wanted: list[tuple[str, str]]) -> list[Grant]:
        self.calls.append(wanted)
        expires = int(self.clock()) + 300
        return [Grant("sb", "uid", expires, f"{m} {p} {expires}") for m, p in wanted]


def test_the_fixed_paths_come_in_one_call_and_are_reused_until_near_expiry() -> None:
    now = [NOW]
    creds = Counting(lambda: now[0])
    assert creds.grant("POST", "/execute").token.startswith("POST /execute")
    assert sorted(creds.calls[0]) == sorted(FIXED)
    creds.grant("GET", "/")
    creds.grant("POST", "/upload")
    assert len(creds.calls) == 1
    now[0] += 300 - RENEW_MARGIN + 1  # inside the margin: renewed, all together again
    creds.grant("POST", "/execute")
    assert len(creds.calls) == 2 and sorted(creds.calls[1]) == sorted(FIXED)


def test_a_download_path_gets_its_own_token_each_time() -> None:
    creds = Counting(lambda: NOW)
    creds.grant("GET", "/")
    creds.grant("GET", "/download/.lkc-staging/a")
    creds.grant("GET", "/download/.lkc-staging/a")
    assert creds.calls[1:] == [[("GET", "/download/.lkc-staging/a")]] * 2


def test_the_async_grant_asks_only_on_a_miss() -> None:
    creds = Counting(lambda: NOW)

    async def run() -> None:
        await creds.agrant("POST", "/execute")
        await creds.agrant("POST", "/execute")

    asyncio.run(run())
    assert len(creds.calls) == 1


def test_the_bearer_token_is_the_api_clients_own() -> None:
    config = SimpleNamespace(api_key={"authorization": "Bearer abc"}, api_key_prefix={}, refresh_api_key_hook=None)
    assert bearer_of(SimpleNamespace(configuration=config)) == "abc"
    prefixed = SimpleNamespace(api_key={"authorization": "xyz"}, api_key_prefix={"authorization": "Bearer"})
    assert bearer_of(SimpleNamespace(configuration=prefixed)) == "xyz"
    certificate_only = SimpleNamespace(api_key={}, api_key_prefix={})
    assert bearer_of(SimpleNamespace(configuration=certificate_only)) is None


def test_the_bearer_token_is_read_again_at_every_issuer_call() -> None:
    """A ServiceAccount's projected token rotates within the hour: the credentials never keep an old one."""
    import json

    import httpx

    seen: list[str] = []

    def issuer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        wanted = json.loads(request.content)["requests"]
        body = {"sandbox": "sb", "sandboxUID": "uid", "expires": int(NOW) + 300, "tokens": ["x"] * len(wanted)}
        return httpx.Response(200, json=body)

    tokens = iter(["first", "second"])
    creds = RouterCredentials(
        IssuerLocation("https://issuer.test", ""), lambda: next(tokens), "team-a", "s", 8888, clock=lambda: NOW
    )
    creds._http = httpx.Client(transport=httpx.MockTransport(issuer))
    creds.grant("GET", "/download/a")
    creds.grant("GET", "/download/b")
    assert seen == ["Bearer first", "Bearer second"]
