"""kube/orphans.py: a claim is deleted as an orphan only when a live read shows its owner (by UID) gone."""

from __future__ import annotations

from typing import Any

from fake_kube import FakeKube

from agentsession_operator.kube.cache import Cache
from agentsession_operator.kube.orphans import collect_orphan, collect_orphans


def _claim(owner_uid: str = "gone-uid", refs: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "ns", "name": "demo-claim", "uid": "claim-uid", "labels": {}}
    if refs:
        ref = {"kind": "AgentSession", "apiVersion": "agentsession.dev/v1alpha1", "name": "demo", "uid": owner_uid}
        meta["ownerReferences"] = [ref]
    return {"metadata": meta}


async def test_an_orphan_is_deleted_and_a_live_owner_s_claim_kept(make_session: Any) -> None:
    kube = FakeKube()
    kube.claims[("ns", "demo-claim")] = _claim()
    assert await collect_orphan(kube, _claim(), lambda: True)  # type: ignore[arg-type]
    assert ("delete-claim", "demo-claim") in kube.writes
    kube.sessions[("ns", "demo")] = make_session(uid="live-uid")
    kube.writes.clear()
    assert not await collect_orphan(kube, _claim("live-uid"), lambda: True)  # type: ignore[arg-type]
    assert kube.writes == []


async def test_no_owner_named_or_not_leader_deletes_nothing() -> None:
    kube = FakeKube()
    assert not await collect_orphan(kube, _claim(refs=False), lambda: True)  # type: ignore[arg-type]
    assert not await collect_orphan(kube, _claim(), lambda: False)  # type: ignore[arg-type]
    assert kube.writes == []


async def test_a_new_leader_checks_only_claims_of_unknown_sessions(make_session: Any) -> None:
    kube = FakeKube()
    cache = Cache()
    cache.claims[("ns", "demo-claim")] = _claim()
    cache.claims[("ns", "known-claim")] = {**_claim(), "metadata": {**_claim()["metadata"], "name": "known-claim"}}
    cache.remember_session(("ns", "demo"), make_session())
    await collect_orphans(kube, cache, lambda _claim: True)  # type: ignore[arg-type]
    assert kube.reads == []  # both claims name a cached session: no read, no delete
    cache.forget_session(("ns", "demo"))
    await collect_orphans(kube, cache, lambda _claim: True)  # type: ignore[arg-type]
    assert kube.reads == [("get-session", "demo")] * 2 and ("delete-claim", "demo-claim") in kube.writes
