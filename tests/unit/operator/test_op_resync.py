"""kube/resync.py: priming fills the cache before any pass, waiting out a not-ready API server; unchanged()
spares a pass for a child listed at the version the cache holds."""

from __future__ import annotations

from typing import Any

import pytest
from fake_kube import FakeKube

from agentsession_operator.decisions.selectors import listed_namespaces
from agentsession_operator.kube import resync
from agentsession_operator.kube.api import ApiException
from agentsession_operator.kube.cache import Cache, Key
from agentsession_operator.kube.primed_watch import PrimedVersions
from agentsession_operator.kube.resync import KIND_RESOURCES


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


async def test_a_replica_given_its_namespaces_lists_those_alone(make_session: Any, make_policy: Any) -> None:
    """--namespace a --namespace b: every start-up listing is of a and of b, none cluster-wide (issue 53
    item 3); kopf's watch of each starts from that namespace's own listing."""
    kube = FakeKube()
    kube.policies = [make_policy("p", namespace="a"), make_policy("q", namespace="elsewhere")]
    kube.sessions[("a", "one")] = make_session("one", namespace="a")
    kube.sessions[("b", "two")] = make_session("two", namespace="b")
    kube.sessions[("elsewhere", "x")] = make_session("x", namespace="elsewhere")
    cache, versions = Cache(), PrimedVersions()
    await resync.prime(kube, cache, Sessions(cache), ("a", "b"), versions)  # type: ignore[arg-type]
    listed = [what for verb, what in kube.reads if verb == "list"]
    assert listed and all(what.endswith((" in a", " in b")) for what in listed), listed
    assert sorted(cache.sessions) == [("a", "one"), ("b", "two")] and list(cache.policies) == ["a"]
    sessions = KIND_RESOURCES["sessions"]
    assert versions.take(sessions, "a") == "1" and versions.take(sessions, "a") is None  # once per namespace


@pytest.mark.parametrize("patterns", [(), ("team-*",), ("a", "!b"), ("a,b",)])
def test_patterns_are_listed_cluster_wide(patterns: tuple[str, ...]) -> None:
    """A --namespace that matches many (a glob, an exclusion, a list) cannot be listed one by one."""
    assert listed_namespaces(patterns) is None


def test_plain_names_are_listed_one_by_one() -> None:
    assert listed_namespaces(("a", "team-1", "a")) == ("a", "team-1")


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


class _Listing:
    """list_versioned answered per kind at list version 100; one kind's listing fails (the others must
    still run, and the loop must go on)."""

    def __init__(self, items: dict[str, list[dict[str, Any]]], failing: str) -> None:
        self.items = items
        self.failing = failing
        self.calls: list[str] = []

    async def list_versioned(self, kind: str) -> tuple[list[dict[str, Any]], str]:
        self.calls.append(kind)
        if kind == self.failing:
            raise ApiException(status=500, reason="etcd leader changed")
        return self.items.get(kind, []), "100"


async def test_resync_forever_drops_what_was_deleted_unseen_every_period(make_policy: Any) -> None:
    """A relist that found no policy at all delivers no event: only the periodic resync notices, drops the
    policy (counted in agentsession_cache_resync_dropped_total), and judges its namespace again; a kind
    whose listing fails is tried again next period, and the other kinds are not held up."""
    import asyncio

    from prometheus_client import REGISTRY

    from agentsession_operator.kube.background import Background

    cache = Cache()
    gone, kept = make_policy("gone"), make_policy("kept")
    gone["metadata"]["resourceVersion"] = "90"  # older than the list: it should have been listed
    kept["metadata"]["resourceVersion"] = "90"
    cache.policies["ns"] = {"gone": gone, "kept": kept}
    kube = _Listing({"policies": [kept]}, failing="pools")
    sessions = Sessions(cache)
    resyncer = resync.Resync(kube, cache, sessions, Background())  # type: ignore[arg-type]

    def dropped() -> float:
        return REGISTRY.get_sample_value("agentsession_cache_resync_dropped_total", {"kind": "policies"}) or 0.0

    before = dropped()
    task = asyncio.create_task(resyncer.forever(period=0.01))
    try:
        for _ in range(500):  # bounded: 5 s at most
            if kube.calls.count("policies") >= 2:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
    assert kube.calls.count("policies") >= 2, kube.calls  # a second period ran after the failing pools
    assert kube.calls[: len(resync.RESYNC_KINDS)] == list(resync.RESYNC_KINDS)
    assert list(cache.policies["ns"]) == ["kept"]
    assert sessions.triggered[:1] == ["ns"]
    assert dropped() - before == 1  # once: the second period found nothing more to drop
