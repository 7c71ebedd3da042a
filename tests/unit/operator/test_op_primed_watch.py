"""kopf's first listing of a primed kind is the prime's (kube/primed_watch.py): nothing listed again, the
watch from the prime's resourceVersion; a later listing (after 410 Gone) is kopf's own."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from kopf._cogs.clients import fetching, watching

from agentsession_operator.kube import primed_watch
from agentsession_operator.kube.primed_watch import PrimedVersions

SESSIONS = ("agentsession.dev", "v1alpha1", "agentsessions")


def test_kopf_lists_through_the_wrapped_function() -> None:
    """The hook relies on kopf's watch calling fetching.fetch_objs by attribute at each listing."""
    assert "fetching.fetch_objs(" in inspect.getsource(watching.continuous_watch)


async def test_the_first_listing_per_namespace_is_the_primes_and_later_ones_are_kopfs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def real(*, resource: Any, namespace: str | None, **_: Any) -> AsyncIterator[tuple[Any, str]]:
        yield [{"listed": resource.plural}], "99"

    monkeypatch.setattr(fetching, "fetch_objs", real)
    versions = PrimedVersions()
    versions.primed(SESSIONS, "42")
    primed_watch.install(versions)
    sessions = SimpleNamespace(group=SESSIONS[0], version=SESSIONS[1], plural=SESSIONS[2])
    pools = SimpleNamespace(group="extensions.agents.x-k8s.io", version="v1beta1", plural="sandboxwarmpools")

    async def listing(resource: Any, namespace: str | None) -> list[tuple[Any, str]]:
        return [chunk async for chunk in fetching.fetch_objs(resource=resource, namespace=namespace, logger=None)]

    assert await listing(sessions, "a") == [([], "42")]
    assert await listing(sessions, "b") == [([], "42")]  # each namespace watched starts from it once
    assert await listing(sessions, "a") == [([{"listed": "agentsessions"}], "99")]  # a relist: kopf's own
    assert await listing(pools, None) == [([{"listed": "sandboxwarmpools"}], "99")]  # not primed
    primed_watch.install(versions)  # installing again wraps kopf's function, not the wrapper
    assert getattr(fetching.fetch_objs, "__wrapped__", None) is real
