"""kube/resync.py: priming fills the cache before any pass, waiting out a not-ready API server; unchanged()
spares a pass for a child listed at the version the cache holds."""

from __future__ import annotations

from typing import Any

import pytest
from fake_kube import FakeKube
from kubernetes_asyncio.client.rest import ApiException

from agentsession_operator.kube import resync
from agentsession_operator.kube.cache import Cache, Key


class Sessions:
    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.triggered: list[str] = []

    def remember_session(self, key: Key, body: dict[str, Any]) -> None:
        self.cache.remember_session(key, body)

    def session_deleted(self, key: Key, uid: str | None) -> None:
        self.cache.forget_session(key)

    def trigger_namespace(self, namespace: str, cause: str) -> None:
        self.triggered.append(namespace)

    def pass_now(self, key: Key) -> None:
        pass


async def test_prime_fills_every_table_of_the_watched_namespaces(
    make_session: Any, make_claim: Any, make_policy: Any
) -> None:
    kube = FakeKube()
    kube.policies = [make_policy("p"), make_policy("q", namespace="elsewhere")]
    kube.sessions[("ns", "demo")] = make_session()
    kube.sessions[("elsewhere", "x")] = make_session("x", namespace="elsewhere")
    kube.claims[("ns", "demo")] = make_claim()
    cache = Cache()
    await resync.prime(kube, cache, Sessions(cache), ("ns",))  # type: ignore[arg-type]
    assert cache.loaded and list(cache.policies) == ["ns"]
    assert list(cache.sessions) == [("ns", "demo")] and ("ns", "demo") in cache.claims
    assert resync.unchanged(cache, "claims", ("ns", "demo"), {"metadata": {"resourceVersion": "nope"}}) is False


async def test_prime_waits_out_a_429(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube()
    answers = [ApiException(status=429, reason="storage is (re)initializing")]
    real = kube.list_policies

    async def first_429(namespace: str | None = None) -> list[dict[str, Any]]:
        if answers:
            raise answers.pop()
        return await real(namespace)

    monkeypatch.setattr(kube, "list_policies", first_429)
    cache = Cache()
    await resync.prime(kube, cache, Sessions(cache))  # type: ignore[arg-type]
    assert cache.loaded and answers == []
