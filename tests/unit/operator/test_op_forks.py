"""kube/forks.py: what a fork's plan reads, and which forks a source's change wakes."""

from __future__ import annotations

from typing import Any

from fake_kube import FakeKube

from agentsession_operator.kube.cache import Cache
from agentsession_operator.kube.forks import fork_inputs, waiting_forks


async def test_a_source_not_ready_yet_is_read_alone(make_session: Any) -> None:
    kube = FakeKube()
    cache = Cache()
    source = make_session("src", status={"phase": "Provisioning"}, uid="src-uid")
    cache.remember_session(("ns", "src"), source)
    fork = make_session("copy", spec={"forkFrom": {"name": "src"}})
    inputs = await fork_inputs(kube, cache, fork)  # type: ignore[arg-type]
    assert inputs.source is not None and inputs.claim is None and kube.reads == []  # from the cache


async def test_only_forks_of_that_source_without_a_claim_wake(make_session: Any) -> None:
    cache = Cache()
    for name, source, claim in (("a", "src", None), ("b", "src", "b-claim"), ("c", "other", None)):
        status = {"claimName": claim} if claim else None
        cache.remember_session(("ns", name), make_session(name, spec={"forkFrom": {"name": source}}, status=status))
    cache.remember_session(("ns2", "d"), make_session("d", namespace="ns2", spec={"forkFrom": {"name": "src"}}))
    assert waiting_forks(cache, "ns", "src") == [("ns", "a")]
