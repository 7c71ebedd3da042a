"""Orphan claims: a claim labelled as ours whose owner session (by UID) a live read shows is gone."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping
from typing import Any

from agentsession_api import names
from agentsession_operator.infra import metrics
from agentsession_operator.infra.logs import logger
from agentsession_operator.kube.cache import Cache
from agentsession_operator.kube.client import Kube
from agentsession_operator.kube.owners import session_for_claim


async def collect_orphan(kube: Kube, claim: Mapping[str, Any], is_leader: Callable[[], bool]) -> bool:
    """Delete the claim when its owner is gone; True when deleted.

    Never by label alone: the owner is the AgentSession ownerReference (or, lacking one, the
    session-uid label), and the verdict comes from the API, not the cache.
    """
    meta = claim["metadata"]
    if meta.get("deletionTimestamp") or not is_leader():
        return False
    owner = next((r for r in meta.get("ownerReferences") or [] if r.get("kind") == names.SESSION_KIND), None)
    labels = meta.get("labels") or {}
    owner_uid = owner["uid"] if owner else labels.get(names.LABEL_SESSION_UID)
    owner_name = owner["name"] if owner else None
    if not owner_uid:
        return False  # nothing names an owner: not provably ours, leave it alone
    namespace = meta["namespace"]
    if owner_name is None:
        alive = any(s["metadata"]["uid"] == owner_uid for s in await kube.list_sessions(namespace))
    else:
        session = await kube.get_session(namespace, owner_name)
        alive = session is not None and session["metadata"]["uid"] == owner_uid
    if alive or not is_leader():  # not leader (any more): the leader's own pass covers it
        return False
    if await kube.delete_claim(namespace, meta["name"], meta.get("uid")):
        metrics.CLAIMS_DELETED.labels(reason="Orphaned").inc()
        logger(namespace=namespace, claim=meta["name"]).info("orphan claim deleted", owner_uid=owner_uid)
    return True


async def collect_orphans(kube: Kube, cache: Cache, leads: Callable[[Mapping[str, Any]], bool]) -> None:
    """Every cached claim whose session the cache does not know (a new leader's first look); `leads`
    says whether this replica acts on a claim's namespace."""
    for claim in list(cache.claims.values()):
        session = session_for_claim(claim)
        if session is None or session not in cache.sessions:
            with contextlib.suppress(Exception):  # the next claim event retries
                await collect_orphan(kube, dict(claim), functools.partial(leads, claim))
