"""Issue 49 item 3: a namespace's hibernated sessions keep at most a policy's limits.maxHibernatedSize of
checkpoints together. A tenant with 100 sessions of 500 MiB put 50 GiB of images on one node: the node
agent's floor (--min-free-bytes) keeps the node's disk from filling, but one tenant could still take the
whole budget of a node from every other."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from agentsession_api import phases
from agentsession_operator.decisions import hibernate as h
from agentsession_operator.decisions import policy, policy_resolve
from agentsession_operator.decisions.actions import HibernateSandbox
from agentsession_operator.kube.hibernation import Hibernator

Make = Callable[..., dict[str, Any]]
GIB = 1 << 30


def test_a_policy_sets_the_namespaces_hibernated_size(make_session: Make, make_policy: Make, now: datetime) -> None:
    session = make_session()
    budget = make_policy("budget", {"limits": {"maxHibernatedSize": "1Gi"}})
    looser = make_policy("looser", {"limits": {"maxHibernatedSize": "5Gi"}})
    resolved = policy_resolve.resolve(session, policy.effective_policy_for(session, [budget, looser]), now)
    assert resolved.max_hibernated_bytes == GIB  # the smallest wins


class Agents:
    def __init__(self, size: int) -> None:
        self.size = size
        self.checkpoints: list[str] = []
        self.deleted: list[str] = []

    async def reachable(self) -> bool:
        return True

    async def checkpoint(
        self, namespace: str, pod: str, name: str, restore_into: str, max_bytes: int | None = None, node: str = ""
    ) -> h.CheckpointResult:
        self.checkpoints.append(name)
        return h.CheckpointResult(True, size_bytes=self.size)

    async def delete(self, namespace: str, name: str) -> bool:
        self.deleted.append(name)
        return True


class Kube:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    async def patch_session_status(self, namespace: str, name: str, status: dict[str, Any], **_: Any) -> None:
        self.patches.append(status)


SESSION = {"metadata": {"namespace": "ns", "name": "s", "uid": "u-1"}}
LOG = type("Log", (), {"info": lambda *a, **k: None, "warning": lambda *a, **k: None})()


async def _hibernate(used: int, size: int) -> tuple[Agents, Kube, list[tuple[str, str]]]:
    agents, kube, events = Agents(size), Kube(), []
    hib = Hibernator(
        kube,
        agents,  # type: ignore[arg-type]
        lambda obj, reason, message, type_: events.append((reason, type_)),
        used_bytes=lambda namespace, uid: used,
    )
    action = HibernateSandbox("sb", "pod", h.checkpoint_name("s", "u-1"), {}, hibernated_budget=GIB)
    await hib.hibernate(action, SESSION, LOG)
    return agents, kube, events


async def test_a_namespace_at_its_hibernated_size_suspends_without_a_checkpoint() -> None:
    agents, kube, events = await _hibernate(used=GIB, size=1)
    assert agents.checkpoints == []
    assert kube.patches[0]["hibernation"]["reason"] == phases.REASON_HIBERNATED_SIZE_EXCEEDED
    assert "maxHibernatedSize" in kube.patches[0]["hibernation"]["message"]
    assert events == [("HibernateFallback", "Warning")]


async def test_a_checkpoint_that_would_pass_the_namespaces_size_is_deleted() -> None:
    agents, kube, _ = await _hibernate(used=GIB - 100, size=200)
    assert agents.checkpoints and agents.deleted == agents.checkpoints
    assert kube.patches[0]["hibernation"]["reason"] == phases.REASON_HIBERNATED_SIZE_EXCEEDED
    assert not kube.patches[0]["hibernation"]["hibernated"]


async def test_within_the_namespaces_size_it_hibernates() -> None:
    agents, kube, events = await _hibernate(used=GIB - 300, size=200)
    assert agents.deleted == [] and kube.patches[0]["hibernation"]["hibernated"]
    assert events == [("Hibernated", "Normal")]


def test_the_cache_sums_the_namespaces_hibernated_checkpoints(make_session: Make) -> None:
    from agentsession_operator.kube.cache import Cache

    cache = Cache()
    for name, uid, record in [
        ("a", "u-a", {"hibernated": True, "sizeBytes": 300}),
        ("b", "u-b", {"hibernated": True, "sizeBytes": 200}),
        ("c", "u-c", {"hibernated": False, "sizeBytes": 999}),  # woke, or fell back: keeps nothing
        ("d", "u-d", {"hibernated": True, "sizeBytes": "lots"}),  # not a size: counts nothing
    ]:
        cache.remember_session(("ns", name), make_session(name, uid=uid, status={"hibernation": record}))
    cache.remember_session(
        ("other", "e"),
        make_session("e", uid="u-e", namespace="other", status={"hibernation": {"hibernated": True, "sizeBytes": 7}}),
    )
    assert cache.hibernated_bytes("ns") == 500
    assert cache.hibernated_bytes("ns", excluding_uid="u-a") == 200  # the session hibernating again
