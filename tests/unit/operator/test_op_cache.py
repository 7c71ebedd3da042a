"""The reconciler's cache keeps only what decisions read."""

import json

import pytest

from agentsession_api.phases import Phase
from agentsession_operator.kube.cache import SANDBOX_SPEC_UNUSED, Cache
from agentsession_operator.kube.projection import slim


def test_slim_drops_managed_fields_and_the_pod_template() -> None:
    body = {
        "metadata": {"name": "s", "resourceVersion": "7", "managedFields": [{"manager": "x"}]},
        "spec": {"operatingMode": "Running", "podTemplate": {"spec": {}}, "volumeClaimTemplates": []},
        "status": {"podIPs": ["127.1.0.5"]},
    }
    small = slim(body, SANDBOX_SPEC_UNUSED)
    assert small == {
        "metadata": {"name": "s", "resourceVersion": "7"},
        "spec": {"operatingMode": "Running"},
        "status": {"podIPs": ["127.1.0.5"]},
    }
    assert "managedFields" in body["metadata"]  # the original is untouched


def test_cache_keeps_the_newest_session() -> None:
    cache = Cache()
    cache.remember_session(("n", "s"), {"metadata": {"name": "s", "resourceVersion": "9"}})
    cache.remember_session(("n", "s"), {"metadata": {"name": "s", "resourceVersion": "8"}})
    assert cache.sessions[("n", "s")]["metadata"]["resourceVersion"] == "9"


def test_cache_keeps_the_newest_claim_and_sandbox() -> None:
    """A slow create answer (no status yet) must not replace the Ready claim the watch delivered."""
    cache = Cache()
    ready = {"metadata": {"name": "c", "resourceVersion": "12"}, "status": {"conditions": [{"type": "Ready"}]}}
    cache.remember_claim(("n", "c"), ready)
    cache.remember_claim(("n", "c"), {"metadata": {"name": "c", "resourceVersion": "10"}})
    assert cache.claims[("n", "c")]["metadata"]["resourceVersion"] == "12"
    cache.remember_sandbox(("n", "s"), {"metadata": {"name": "s", "resourceVersion": "5"}})
    cache.remember_sandbox(("n", "s"), {"metadata": {"name": "s", "resourceVersion": "4"}})
    assert cache.sandboxes[("n", "s")]["metadata"]["resourceVersion"] == "5"


def test_deleted_sessions_are_never_cached_again_and_the_tombstones_are_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentsession_operator.kube import cache as cache_module

    monkeypatch.setattr(cache_module, "MAX_TOMBSTONES", 3)
    c = cache_module.Cache()
    body = {"metadata": {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "5"}}
    c.session_deleted("u1")
    c.remember_session(("ns", "a"), body)
    assert ("ns", "a") not in c.sessions
    for uid in ("u2", "u3", "u4"):
        c.session_deleted(uid)
    assert list(c.deleted) == ["u2", "u3", "u4"]  # the oldest went first
    c.remember_session(("ns", "a"), body)
    assert ("ns", "a") in c.sessions


def test_cached_bodies_share_their_keys_and_short_strings() -> None:
    """Two claims decoded from JSON each have their own key strings; cached, they share them (memory at
    10,000 sessions), and the body is otherwise the same, enum values of our own writes included."""
    text = '{"metadata": {"name": "%s", "managedFields": [{}]}, "status": {"conditions": [{"type": "Ready"}]}}'
    cache = Cache()
    for name in ("a", "b"):
        cache.remember_claim(("ns", name), json.loads(text % name))
    a, b = cache.claims[("ns", "a")], cache.claims[("ns", "b")]
    assert a == {"metadata": {"name": "a"}, "status": {"conditions": [{"type": "Ready"}]}}
    key_a = next(k for k in a["status"]["conditions"][0])
    key_b = next(k for k in b["status"]["conditions"][0])
    assert key_a is key_b and a["status"]["conditions"][0]["type"] is b["status"]["conditions"][0]["type"]
    cache.remember_session(("ns", "s"), {"metadata": {"name": "s"}, "status": {"phase": Phase.READY}})
    assert cache.sessions[("ns", "s")]["status"]["phase"] is Phase.READY


def test_sessions_are_indexed_by_namespace_through_every_write() -> None:
    from agentsession_operator.kube.cache import ByNamespace

    table = ByNamespace()
    table[("a", "1")] = {"n": 1}
    table[("b", "2")] = {"n": 2}
    table.setdefault(("a", "3"), {"n": 3})
    table.update({("c", "4"): {"n": 4}})
    assert dict(table.in_namespace("a")) == {("a", "1"): {"n": 1}, ("a", "3"): {"n": 3}}
    assert table.pop(("a", "1")) == {"n": 1} and table.pop(("a", "1"), None) is None
    del table[("a", "3")]
    assert table.in_namespace("a") == {} and sorted(table.namespaces()) == ["b", "c"]
    table.popitem()
    table.clear()
    assert table == {} and table.namespaces() == []


def test_a_namespace_scan_reads_only_that_namespace() -> None:
    from agentsession_operator.kube.cache import Cache

    cache = Cache()
    for ns, name in (("a", "1"), ("b", "2"), ("a", "3")):
        cache.remember_session((ns, name), {"metadata": {"namespace": ns, "name": name, "uid": name}})
    assert cache.sessions_in("a") == [("a", "1"), ("a", "3")]
    assert [b["metadata"]["name"] for b in cache.scan_bodies_in("b")] == ["2"]
    cache.forget_session(("a", "1"))
    assert cache.sessions_in("a") == [("a", "3")]
