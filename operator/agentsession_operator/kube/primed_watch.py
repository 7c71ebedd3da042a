"""kopf's first listing of a kind the cache was primed with, answered by the prime's own listing: nothing
to deliver, and its resourceVersion to watch from.

At a start (a restart, a failover) kopf lists every session, claim, Sandbox and NetworkPolicy and hands
each listed object to its handler, one worker each, all at once, after prime() already listed and cached
every one of them (kube/resync.py): at 10,000 sessions 40,000 objects decoded twice, a worker and a body
per object alive together (the peak memory), and most of a fresh replica's busy time. Watching from the
prime's resourceVersion delivers every change since, as a watch event, which is what an informer does
after its list; the first pass over every session is then the take-over's (Reconciler.take_over), from
the cache, without a GET.

Only the first listing per kind and namespace: a later one (a watch that ended with 410 Gone, the version
compacted away) lists for real. kopf has no public hook for this, so its fetch function is wrapped
(`install`), checked against the kopf version the project pins by a unit test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

Resource = tuple[str, str, str]  # group, version, plural


class PrimedVersions:
    """The resourceVersion of each primed kind's listing (cluster-wide, or one namespace's), handed out
    once per namespace watched."""

    def __init__(self) -> None:
        self._versions: dict[tuple[Resource, str | None], str] = {}
        self._used: set[tuple[Resource, str | None]] = set()

    def primed(self, resource: Resource, version: str, namespace: str | None = None) -> None:
        if version:
            self._versions[(resource, namespace)] = version

    def take(self, resource: Resource, namespace: str | None) -> str | None:
        """The version to watch `resource` from instead of listing it (None: list it): the namespace's own
        listing's, else the cluster-wide one's."""
        version = self._versions.get((resource, namespace)) or self._versions.get((resource, None))
        if version is None or (resource, namespace) in self._used:
            return None
        self._used.add((resource, namespace))
        return version


def install(versions: PrimedVersions) -> None:
    """Wrap kopf's listing so a primed kind's first listing is the prime's (see the module docstring)."""
    from kopf._cogs.clients import fetching  # kopf's internals: no public hook for this

    real: Callable[..., AsyncIterator[tuple[Any, str]]] = getattr(
        fetching.fetch_objs, "__wrapped__", fetching.fetch_objs
    )

    async def fetch_objs(*, resource: Any, namespace: str | None, **kwargs: Any) -> AsyncIterator[tuple[Any, str]]:
        version = versions.take((resource.group, resource.version, resource.plural), namespace)
        if version is not None:
            yield [], version
            return
        async for chunk in real(resource=resource, namespace=namespace, **kwargs):
            yield chunk

    fetch_objs.__wrapped__ = real  # type: ignore[attr-defined]
    fetching.fetch_objs = fetch_objs
