"""The watch handlers, each a few lines: filter, update the reconciler's cache, hand over to the reconciler.

A listing (type None: kopf's first list, or its relist after a watch ended with 410 Gone) brings no
DELETED event for what disappeared meanwhile: each handler tells the reconciler, which lists once more
after the burst and drops what is gone (kube/cache.unseen_deletions).

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

MANAGED = {c.LABEL_MANAGED_BY: c.MANAGED_BY}


def _key(body: kopf.Body) -> tuple[str, str]:
    return str(body["metadata"]["namespace"]), str(body["metadata"]["name"])


def _ours(reconciler: Any, body: kopf.Body, kind: str, type: str | None) -> bool:
    """Sharded (--shards), a replica keeps only its shards' namespaces: any other event is dropped here,
    before anything is copied or stored (kopf still receives it on its cluster-wide watch). A listed one
    still counts for the relist's resync, which compares the API with what this replica caches."""
    if reconciler.caches(str(body["metadata"]["namespace"])):
        return True
    if type is None:
        reconciler.relisted(kind)
    return False


# ---- AgentSession: every event runs one level-triggered pass --------------------------------------
@kopf.on.event(names.GROUP, names.VERSION, names.SESSION_PLURAL)
async def session_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    reconciler = reconciler_of(memo)
    if type is None:
        reconciler.relisted("sessions")  # kopf listed: drop what the listing lacks
    key = _key(body)
    if not reconciler.caches(key[0]):
        return  # another replica's shard: nothing stored (see _ours)
    if type == "DELETED":
        reconciler.session_deleted(key, body["metadata"].get("uid"))
        reconciler.wake_forks(*key)
        return
    reconciler.remember_session(key, dict(body))
    await reconciler.reconcile(key, cause=f"session {type or 'listed'}")
    reconciler.wake_forks(*key)  # forks waiting for this session to be Ready


# ---- Children and inputs: keep the cache current, then reconcile the session they concern ---------
@kopf.on.event(c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.CLAIM_PLURAL, labels=MANAGED)
async def claim_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    reconciler = reconciler_of(memo)
    if not _ours(reconciler, body, "claims", type):
        return
    session = reconciler.session_for_claim(dict(body))
    unknown_owner = session is None or session not in reconciler.cache.sessions
    if type is None:
        reconciler.relisted("claims")  # kopf listed: drop what the listing lacks
        if not unknown_owner and reconciler.unchanged("claims", _key(body), body):
            return  # as the cache has it (start-up listing): the session's own listing runs its pass
    if type == "DELETED":
        reconciler.cache.claims.pop(_key(body), None)
    else:
        reconciler.cache.remember_claim(_key(body), body)
    if type != "DELETED" and unknown_owner and await reconciler.collect_orphan(dict(body)):
        return
    if session is not None:
        await reconciler.reconcile(session, cause=f"claim {type or 'listed'}")


@kopf.on.event(c.SANDBOX_GROUP, c.SANDBOX_VERSION, c.SANDBOX_PLURAL)
async def sandbox_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    reconciler = reconciler_of(memo)
    if not _ours(reconciler, body, "sandboxes", type):
        return
    session = reconciler.session_for_sandbox(dict(body))
    if type is None:
        reconciler.relisted("sandboxes")  # kopf listed: drop what the listing lacks
        if session is not None and reconciler.unchanged("sandboxes", _key(body), body):
            return  # as the cache has it (start-up listing): the session's own listing runs its pass
    if type == "DELETED":
        reconciler.cache.sandboxes.pop(_key(body), None)
    elif session is not None:
        reconciler.cache.remember_sandbox(_key(body), body)
    if session is not None:
        await reconciler.reconcile(session, cause=f"sandbox {type or 'listed'}")


@kopf.on.event("networking.k8s.io", "v1", "networkpolicies", labels=MANAGED)
async def network_policy_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A session's NetworkPolicy changed or went (someone edited or deleted it): its session puts it back."""
    reconciler = reconciler_of(memo)
    key = _key(body)
    if not reconciler.caches(key[0]):
        return
    before = reconciler.cache.network_policies.get(key)
    if type == "DELETED":
        reconciler.cache.network_policies.pop(key, None)
    else:
        reconciler.cache.remember_network_policy(key, body)
    session = reconciler.session_for_network_policy(dict(body))
    changed = type == "DELETED" or before is None or before.get("spec") != body.get("spec")
    if session is not None and changed:
        await reconciler.reconcile(session, cause=f"network policy {type or 'listed'}")


@kopf.on.event(c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.WARM_POOL_PLURAL)
async def warm_pool_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    reconciler = reconciler_of(memo)
    if type is None:
        reconciler.relisted("pools")  # kopf listed: drop what the listing lacks
    key = _key(body)
    known = key in reconciler.cache.pools
    template = reconciler.cache.pool_templates.get(key)
    if type == "DELETED":
        reconciler.cache.forget_pool(key)
    else:
        reconciler.cache.remember_pool(key, body)
    if known != (key in reconciler.cache.pools):
        reconciler.trigger_namespace(key[0], cause="warm pool appeared or went")
    elif template != reconciler.cache.pool_templates.get(key):
        reconciler.trigger_namespace(key[0], cause="warm pool's template changed")


@kopf.on.event(c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.TEMPLATE_PLURAL)
async def template_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A SandboxTemplate's network settings changed: its namespace's sessions judge NetworkIsolated again."""
    reconciler = reconciler_of(memo)
    if type is None:
        reconciler.relisted("templates")  # kopf listed: drop what the listing lacks
    key = _key(body)
    before = reconciler.cache.templates.get(key)
    if type == "DELETED":
        reconciler.cache.templates.pop(key, None)
    else:
        reconciler.cache.remember_template(key, body)
    after = reconciler.cache.templates.get(key)
    if (before or {}).get("spec") != (after or {}).get("spec"):
        reconciler.trigger_namespace(key[0], cause=f"template {key[1]} network settings changed")


@kopf.on.event(names.GROUP, names.VERSION, names.POLICY_PLURAL)
async def policy_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    reconciler = reconciler_of(memo)
    if type is None:
        reconciler.relisted("policies")  # kopf listed: drop what the listing lacks
    namespace, name = _key(body)
    policies = reconciler.cache.policies[namespace]
    before = policies.get(name, {}).get("spec")
    if type == "DELETED":
        policies.pop(name, None)
    else:
        policies[name] = dict(body)
    if before != (policies.get(name) or {}).get("spec"):
        reconciler.trigger_namespace(namespace, cause=f"policy {name} changed")
    if type != "DELETED":
        await reconciler.update_policy_status(namespace, name)
