"""A relist (kopf's after 410 Gone) brings no DELETED events: the cache drops what a list no longer has."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentsession_operator.kube import client as kube_client
from agentsession_operator.kube.api import Answer, ApiClient, ApiException, Credentials
from agentsession_operator.kube.cache import Cache, unseen_deletions
from agentsession_operator.kube.reconciler import Reconciler


def _body(ns: str, name: str, rv: int, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "resourceVersion": str(rv), **extra}}


def test_unseen_deletions_drops_only_what_the_list_should_have_had() -> None:
    cached = {
        ("n", "old"): _body("n", "old", 5),
        ("n", "kept"): _body("n", "kept", 6),
        ("n", "new"): _body("n", "new", 12),
    }
    # "new" is newer than the list's snapshot (10): a watch event after the list; the list could not see it.
    assert unseen_deletions(cached, {("n", "kept")}, "10") == [("n", "old")]
    assert unseen_deletions({("n", "p"): 3}, set(), "10") == [("n", "p")]  # pools cache versions only
    assert unseen_deletions(cached, set(), "not-a-number") == []  # opaque: drop nothing


class ListingKube:
    """list_versioned over fixed contents (the rest of Kube is not called by resync)."""

    def __init__(self, items: dict[str, list[dict[str, Any]]], version: str) -> None:
        self.items = items
        self.version = version

    async def list_versioned(self, kind: str) -> tuple[list[dict[str, Any]], str]:
        return self.items.get(kind, []), self.version


async def test_resync_drops_a_deleted_policy_and_pool_and_rejudges_the_namespace() -> None:
    kube = ListingKube({"policies": [_body("n", "keeper", 3)], "pools": [_body("n", "pool", 4)]}, "20")
    rec = Reconciler(kube)  # type: ignore[arg-type]
    rec.cache.loaded = True
    rec.cache.policies["n"]["keeper"] = _body("n", "keeper", 3)
    rec.cache.policies["n"]["doomed"] = _body("n", "doomed", 7)
    rec.cache.pools.update({("n", "pool"): 4, ("n", "doomed-pool"): 8})
    rec.cache.remember_session(("n", "s"), _body("n", "s", 9))
    try:
        assert await rec.resync("policies") == [("n", "doomed")]
        assert list(rec.cache.policies["n"]) == ["keeper"]
        assert await rec.resync("pools") == [("n", "doomed-pool")]
        assert set(rec.cache.pools) == {("n", "pool")}
        assert rec.scheduler.due(("n", "s")) is not None  # the namespace's sessions are judged again
    finally:
        await rec.scheduler.stop()


async def test_resync_forgets_sessions_and_claims_deleted_unseen() -> None:
    claim = _body(
        "n",
        "s-claim",
        11,
        ownerReferences=[
            {"kind": "AgentSession", "apiVersion": "agentsession.dev/v1alpha1", "name": "live", "uid": "u"}
        ],
    )
    kube = ListingKube({"sessions": [_body("n", "live", 10)], "claims": []}, "30")
    rec = Reconciler(kube)  # type: ignore[arg-type]
    rec.cache.loaded = True
    rec.cache.remember_session(("n", "live"), _body("n", "live", 10))
    rec.cache.remember_session(("n", "gone"), _body("n", "gone", 12))
    rec.cache.remember_claim(("n", "s-claim"), claim)
    try:
        assert await rec.resync("sessions") == [("n", "gone")]
        assert set(rec.cache.sessions) == {("n", "live")}
        assert await rec.resync("claims") == [("n", "s-claim")]
        assert not rec.cache.claims
        assert rec.scheduler.due(("n", "live")) is not None  # its claim went: judged again
    finally:
        await rec.scheduler.stop()


class PagedCustom:
    """list_cluster_custom_object in pages of `limit`, as the API server with a continue token."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.calls: list[dict[str, Any]] = []

    async def list_cluster_custom_object(self, group: str, version: str, plural: str, **kw: Any) -> dict[str, Any]:
        self.calls.append(kw)
        start = int(kw.get("_continue") or 0)
        end = start + kw["limit"]
        items = [_body("n", n, 1, managedFields=[{"big": "x" * 100}]) for n in self.names[start:end]]
        more = str(end) if end < len(self.names) else ""
        return {"metadata": {"resourceVersion": "42" if start == 0 else "99", "continue": more}, "items": items}


def raw_answer(body: dict[str, Any]) -> Answer:
    """An undecoded HTTP answer (ApiClient.request): the caller reads its size before decoding it."""
    return Answer(200, {}, json.dumps(body).encode())


class PagedApiClient:
    """ApiClient.request over a list path in pages of `limit`, as the API server with a continue token."""

    def __init__(self, names: list[str], item_bytes: int = 0) -> None:
        self.pages = PagedCustom(names)
        self.item_bytes = item_bytes
        self.calls: list[tuple[str, dict[str, Any], str]] = []

    async def request(self, method: str, path: str, **kw: Any) -> Answer:
        query = dict(kw["query"])
        self.calls.append((path, query, kw["accept"]))
        page = await self.pages.list_cluster_custom_object(
            "", "", "", limit=query["limit"], _continue=query.get("continue")
        )
        for item in page["items"]:
            item["spec"] = {"env": [{"name": "V", "value": "x" * self.item_bytes}]}
        return raw_answer(page)


async def test_listing_for_a_resync_comes_in_pages_of_metadata_only(monkeypatch: Any) -> None:
    monkeypatch.setattr(kube_client, "LIST_PAGE", 2)
    kube = kube_client.Kube(PagedApiClient(["a", "b", "c", "d", "e"]))  # type: ignore[arg-type]
    items, version = await kube.list_versioned("claims")
    assert [i["metadata"] for i in items] == [{"namespace": "n", "name": n} for n in "abcde"]
    assert version == "42"  # the first page's snapshot: every page is of it
    calls = kube.api_client.calls  # type: ignore[attr-defined]
    assert [q.get("continue") for _, q, _ in calls] == [None, "2", "4"]
    assert all(q["labelSelector"] for _, q, _ in calls)  # ours only
    assert all(path == "/apis/extensions.agents.x-k8s.io/v1beta1/sandboxclaims" for path, _, _ in calls)
    assert all(accept.startswith("application/json;as=PartialObjectMetadataList;") for _, _, accept in calls)


async def test_a_start_up_listing_comes_in_pages_of_whole_objects(monkeypatch: Any) -> None:
    monkeypatch.setattr(kube_client, "LIST_PAGE", 2)
    kube = kube_client.Kube(PagedApiClient(["a", "b", "c"]))  # type: ignore[arg-type]
    items, version, token = await kube.list_page("sessions")
    assert [i["metadata"]["name"] for i in items] == ["a", "b"] and version == "42" and token == "2"
    items, _, token = await kube.list_page("sessions", token)
    assert [i["metadata"]["name"] for i in items] == ["c"] and token is None


async def test_a_listing_of_large_objects_comes_in_pages_bounded_in_bytes() -> None:
    """Attack (issue 49 item 2, found by bench_session_cost): a tenant's 200 maximal sessions (1.3 MiB each,
    as etcd takes them) in one start-up page of 500 were decoded at once by every replica, whichever
    namespaces it watched: a replica of an empty namespace settled at 895 MiB instead of 131. Now the first
    page is small and each next one holds what fits in PAGE_BYTES at the size seen."""
    api = PagedApiClient([f"s{i:03d}" for i in range(60)], item_bytes=1 << 20)
    kube = kube_client.Kube(api)  # type: ignore[arg-type]
    token: str | None = None
    sizes = []
    while True:
        items, _, token = await kube.list_page("sessions", token)
        sizes.append(len(items))
        if not token:
            break
    assert sum(sizes) == 60 and sizes[0] == kube_client.FIRST_PAGE
    assert max(sizes) * (1 << 20) <= kube_client.PAGE_BYTES, sizes
    # Small objects: the pages grow (4x a page) to LIST_PAGE.
    small = kube_client.Kube(PagedApiClient([f"s{i:04d}" for i in range(3000)]))  # type: ignore[arg-type]
    token, sizes = None, []
    while True:
        items, _, token = await small.list_page("sessions", token)
        sizes.append(len(items))
        if not token:
            break
    assert sizes[:5] == [4, 16, 64, 256, 500] and sum(sizes) == 3000


async def test_a_refused_page_is_an_api_error_with_its_retry_after() -> None:
    class Refusing(PagedApiClient):
        async def request(self, method: str, path: str, **kw: Any) -> Answer:
            raise ApiException(429, "Too Many Requests", b'{"kind": "Status", "code": 429}', {"Retry-After": "1"})

    kube = kube_client.Kube(Refusing([]))  # type: ignore[arg-type]
    with pytest.raises(kube_client.ApiException) as refused:
        await kube.list_page("sessions")
    assert refused.value.status == 429 and refused.value.headers["Retry-After"] == "1"


@pytest.mark.parametrize(
    ("limit", "body_bytes", "expected"),
    [(20, 1000, 80), (500, 1000, 500), (20, 20 << 20, 4), (1, 50 << 20, 1), (100, 4 << 20, 100)],
)
def test_next_page_limit(limit: int, body_bytes: int, expected: int) -> None:
    assert kube_client.next_page_limit(limit, body_bytes) == expected


async def test_a_long_listing_is_relisted_once_after_its_last_event(monkeypatch: Any) -> None:
    """A fresh replica's listing of 3,000 sessions took kopf 30 s to hand over; debounced from its first
    event, the resync listed everything again every 2 s of it (90 lists instead of 18)."""
    import asyncio

    from agentsession_operator.kube import resync as resync_module

    monkeypatch.setattr(resync_module, "RESYNC_DEBOUNCE", 0.05)
    kube = ListingKube({}, "20")
    calls: list[str] = []

    async def counting(kind: str) -> tuple[list[dict[str, Any]], str]:
        calls.append(kind)
        return [], "20"

    kube.list_versioned = counting  # type: ignore[method-assign]
    rec = Reconciler(kube)  # type: ignore[arg-type]
    for _ in range(8):  # listed objects arriving over 4 debounce periods
        rec.relisted("sessions")
        await asyncio.sleep(0.025)
    await asyncio.sleep(0.2)
    assert calls == ["sessions"]
    await rec.scheduler.stop()


def test_a_body_at_the_cached_version_keeps_the_cached_copy() -> None:
    """A listing hands over every object the cache already holds (prime read them): the copy built first
    stays, instead of a new one per event among the listing's short-lived bodies (memory never returned)."""
    cache = Cache()
    cache.remember_session(("n", "s"), _body("n", "s", 5))
    cache.remember_claim(("n", "c"), _body("n", "c", 6))
    cache.remember_network_policy(("n", "p"), _body("n", "p", 7))
    session, claim, policy = cache.sessions[("n", "s")], cache.claims[("n", "c")], cache.network_policies[("n", "p")]
    cache.remember_session(("n", "s"), _body("n", "s", 5))
    cache.remember_claim(("n", "c"), _body("n", "c", 6))
    cache.remember_network_policy(("n", "p"), _body("n", "p", 7))
    assert cache.sessions[("n", "s")] is session and cache.claims[("n", "c")] is claim
    assert cache.network_policies[("n", "p")] is policy
    cache.remember_session(("n", "s"), _body("n", "s", 8, labels={"a": "b"}))  # a newer one replaces it
    assert cache.sessions[("n", "s")]["metadata"]["labels"] == {"a": "b"}


class NamespacedApiClient(ApiClient):
    """A namespace's sessions over ApiClient.request, each with a 1 MiB env value: in pages of `limit` when
    asked for one (a continue token), else all at once."""

    def __init__(self, count: int) -> None:
        super().__init__(Credentials(server="https://127.0.0.1:1"))
        self.count = count
        self.page_sizes: list[int] = []
        self.paths: list[str] = []

    async def request(self, method: str, path: str, **kw: Any) -> Answer:
        query = dict(kw.get("query") or [])
        self.paths.append(path)
        start = int(query.get("continue") or 0)
        end = min(start + int(query.get("limit") or self.count), self.count)
        items = []
        for i in range(start, end):
            session = _body("team-a", f"s{i:03d}", 1)
            session["spec"] = {"env": [{"name": "V", "value": "x" * (1 << 20)}], "warmPoolRef": {"name": "p"}}
            items.append(session)
        self.page_sizes.append(len(items))
        page = {"metadata": {"resourceVersion": "7", "continue": str(end) if end < self.count else ""}, "items": items}
        return raw_answer(page)


async def test_a_live_listing_of_a_namespaces_sessions_never_holds_them_whole() -> None:
    """Attack (issue 49 item 2): admission under a cap (maxSessionsPerLabel; maxSessionsPerNamespace on a
    replica that does not cache the namespace), the checkpoint sweep and the orphan check list a
    namespace's sessions live. They decoded every session of the namespace at once and kept them whole:
    1,000 maximal sessions (1.3 GiB as stored) in a tenant's namespace took down whichever replica
    answered its next create. A live listing must come in pages bounded in bytes and keep only what the
    cache keeps (session_projection)."""
    api = NamespacedApiClient(60)
    kube = kube_client.Kube(api)
    try:
        listed = await kube.list_sessions("team-a")
    finally:
        await api.close()
    assert [s["metadata"]["name"] for s in listed] == [f"s{i:03d}" for i in range(60)]
    assert all("/namespaces/team-a/" in path for path in api.paths)
    assert max(api.page_sizes) * (1 << 20) <= 8 << 20, f"pages of {api.page_sizes} sessions of 1 MiB"
    assert all("value" not in e for s in listed for e in s["spec"]["env"]), "the env values were kept"
