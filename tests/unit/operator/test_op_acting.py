"""kube/acting.py: each action's write, and the cases it must refuse."""

from __future__ import annotations

from typing import Any

import pytest
from fake_kube import FakeKube

from agentsession_operator.decisions.actions import ApplyNetworkPolicy, CreateClaim, DeleteClaim, PatchSandbox
from agentsession_operator.infra.logs import logger
from agentsession_operator.kube.acting import Actor
from agentsession_operator.kube.cache import Cache
from agentsession_operator.kube.status_writer import SessionGone


def _actor(kube: FakeKube, cache: Cache | None = None) -> tuple[Actor, list[str]]:
    events: list[str] = []
    actor = Actor(kube, cache or Cache(), lambda: None, lambda obj, reason, message, type_: events.append(reason))  # type: ignore[arg-type]
    return actor, events


def _manifest(name: str = "demo-claim") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name}, "spec": {}}


async def test_a_created_claim_is_cached_and_a_409_asks_for_another_pass(make_session: Any) -> None:
    kube = FakeKube()
    actor, _ = _actor(kube)
    assert not await actor.act(CreateClaim(_manifest()), make_session(), None, logger(), None)
    assert ("ns", "demo-claim") in actor.cache.claims
    assert await actor.act(CreateClaim(_manifest()), make_session(), None, logger(), None)  # exists: 409
    record = actor.records.get(("ns", "demo"))
    assert record is not None and record.create_refused


async def test_no_claim_for_a_session_deleted_meanwhile(make_session: Any) -> None:
    cache = Cache()
    session = make_session()
    cache.session_deleted(session["metadata"]["uid"])
    actor, _ = _actor(FakeKube(), cache)
    with pytest.raises(SessionGone):
        await actor.act(CreateClaim(_manifest()), session, None, logger(), None)


async def test_delete_and_suspend_post_their_events(make_session: Any, make_claim: Any) -> None:
    kube = FakeKube()
    kube.claims[("ns", "demo")] = make_claim()
    kube.sandboxes[("ns", "demo")] = {"metadata": {"namespace": "ns", "name": "demo"}, "spec": {"replicas": 1}}
    actor, events = _actor(kube)
    await actor.act(DeleteClaim("demo", "TTLExpired"), make_session(), make_claim(), logger(), 1.0)
    patch = {"spec": {"operatingMode": "Suspended"}}
    await actor.act(PatchSandbox("demo", patch), make_session(), make_claim(), logger(), None)
    assert events == ["TTLExpired", "Suspended"]
    assert kube.sandboxes[("ns", "demo")]["spec"] == {"replicas": 1, "operatingMode": "Suspended"}


async def test_a_network_policy_of_someone_else_is_never_overwritten(make_session: Any) -> None:
    kube = FakeKube()
    foreign = {"metadata": {"namespace": "ns", "name": "agentsession-demo", "ownerReferences": []}, "spec": {}}
    kube.network_policies[("ns", "agentsession-demo")] = foreign
    actor, _ = _actor(kube)
    wanted = {"metadata": {"namespace": "ns", "name": "agentsession-demo"}, "spec": {"podSelector": {}}}
    with pytest.raises(RuntimeError, match="not this session's"):
        await actor.apply_network_policy(ApplyNetworkPolicy(wanted), make_session(), logger())
    assert not [w for w in kube.writes if w[0] == "replace-network-policy"]
