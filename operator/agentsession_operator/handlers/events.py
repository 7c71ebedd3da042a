"""The watch handlers: each hands its event to kube/watch_events.py (what the cache takes, which passes run).

No handler here is a change-handler (on.create/update/delete), a timer or a daemon, so kopf adds no
finalizer and writes no progress annotations: deleting an AgentSession never waits for the operator,
and its claim, Sandbox, Pod and PVCs go by ownerReference garbage collection even while it is down.
Garbage collection waits for the session object to go, which a finalizer of someone else's can keep
for good: so a session's pass deletes its claim as soon as it has a deletionTimestamp (decisions.actions),
and it holds its quota place until the claim is gone (decisions.quota).
"""

from __future__ import annotations

from typing import Any

import kopf

from agentsession_api import names
from agentsession_operator import constants as c
from agentsession_operator.handlers.state import reconciler_of
from agentsession_operator.kube import watch_events

MANAGED = {c.LABEL_MANAGED_BY: c.MANAGED_BY}


@kopf.on.event(names.GROUP, names.VERSION, names.SESSION_PLURAL)
async def session_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await watch_events.session(reconciler_of(memo), type, dict(body))


@kopf.on.event(c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.CLAIM_PLURAL, labels=MANAGED)
async def claim_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await watch_events.claim(reconciler_of(memo), type, dict(body))


@kopf.on.event(c.SANDBOX_GROUP, c.SANDBOX_VERSION, c.SANDBOX_PLURAL)
async def sandbox_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await watch_events.sandbox(reconciler_of(memo), type, dict(body))


@kopf.on.event("networking.k8s.io", "v1", "networkpolicies", labels=MANAGED)
async def network_policy_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await watch_events.network_policy(reconciler_of(memo), type, dict(body))


@kopf.on.event(c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.WARM_POOL_PLURAL)
async def warm_pool_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    watch_events.warm_pool(reconciler_of(memo), type, dict(body))


@kopf.on.event(c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.TEMPLATE_PLURAL)
async def template_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    watch_events.template(reconciler_of(memo), type, dict(body))


@kopf.on.event(names.GROUP, names.VERSION, names.POLICY_PLURAL)
async def policy_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    await watch_events.policy(reconciler_of(memo), type, dict(body))
