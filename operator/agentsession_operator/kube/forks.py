"""Forks: what a fork without a claim waits on (its source, the source's claim, Sandbox, PVCs and their
StorageClasses, read for decisions/fork.py), and waking the forks of a session that changed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agentsession_operator.decisions import decide, fork, naming
from agentsession_operator.kube import clock
from agentsession_operator.kube.cache import Cache, Key
from agentsession_operator.kube.client import Kube


async def fork_inputs(kube: Kube, cache: Cache, session: Mapping[str, Any]) -> decide.ForkInputs:
    """A fork's inputs: the source session, its claim, its Sandbox read live (the cache drops
    volumeClaimTemplates), the source's PVCs and their StorageClasses."""
    namespace = session["metadata"]["namespace"]
    name = fork.source_name(session) or ""
    source = cache.sessions.get((namespace, name)) or await kube.get_session(namespace, name)
    if source is None or (source.get("status") or {}).get("phase") not in fork.FORKABLE_PHASES:
        return decide.ForkInputs(source)
    claim_name = naming.claim_name(name, source["metadata"]["uid"])
    claim = cache.claims.get((namespace, claim_name)) or await kube.get_claim(namespace, claim_name)
    bound = (((claim or {}).get("status") or {}).get("sandbox") or {}).get("name")
    sandbox = await kube.get_sandbox(namespace, bound) if bound else None
    pvcs: dict[str, dict[str, Any] | None] = {}
    classes: dict[str, dict[str, Any] | None] = {}
    for pvc_name in fork.source_pvc_names(sandbox):
        pvcs[pvc_name] = await kube.get_pvc(namespace, pvc_name)
    for pvc in pvcs.values():
        class_name = ((pvc or {}).get("spec") or {}).get("storageClassName")
        if class_name and class_name not in classes:
            classes[class_name] = await kube.get_storage_class(class_name)
    return decide.ForkInputs(source, claim, sandbox, pvcs, classes)


def waiting_forks(cache: Cache, namespace: str, source: str) -> list[Key]:
    """The forks of `source` still without a claim (it may be Ready now: judge them again)."""
    found = []
    for key in cache.forks_in(namespace):
        body = cache.sessions[key]
        if fork.source_name(body) == source and not (body.get("status") or {}).get("claimName"):
            found.append(key)
    return found


def wake_forks(cache: Cache, namespace: str, source: str, pass_soon: Callable[..., None]) -> None:
    now = clock.now()
    for key in waiting_forks(cache, namespace, source):
        pass_soon(key, "its source changed", now)
