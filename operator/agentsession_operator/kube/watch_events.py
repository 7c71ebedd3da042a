"""What each watch event does: the cache takes it, and what changed decides which passes run (issue 50 item 1).

The kopf handlers (handlers/events.py) only hand each event here, so they reach into nothing; this room is
kopf-free, so a unit test drives it with plain dicts. A listing (type None: kopf's first list, or its relist
after a watch ended with 410 Gone) brings no DELETED event for what disappeared meanwhile: each event tells
the reconciler, which lists once more after the burst and drops what is gone (kube/cache.unseen_deletions).
"""

from __future__ import annotations

from typing import Any

from agentsession_operator.kube.cache import Key
from agentsession_operator.kube.reconciler import Reconciler

Body = dict[str, Any]


def _key(body: Body) -> Key:
    return str(body["metadata"]["namespace"]), str(body["metadata"]["name"])


def _ours(rec: Reconciler, body: Body, kind: str, type: str | None) -> bool:
    """Sharded (--shards), a replica keeps only its shards' namespaces: any other event is dropped here,
    before anything is copied or stored (kopf still receives it on its cluster-wide watch). A listed one
    still counts for the relist's resync, which compares the API with what this replica caches."""
    if rec.caches(str(body["metadata"]["namespace"])):
        return True
    if type is None:
        rec.relisted(kind)
    return False


async def session(rec: Reconciler, type: str | None, body: Body) -> None:
    """Every event of a session runs one level-triggered pass; forks waiting on it look again."""
    if type is None:
        rec.relisted("sessions")
    key = _key(body)
    if not rec.caches(key[0]):
        return  # another replica's shard: nothing stored (see _ours)
    if type == "DELETED":
        rec.session_deleted(key, body["metadata"].get("uid"))
        rec.wake_forks(*key)
        return
    rec.remember_session(key, body)
    await rec.reconcile(key, cause=f"session {type or 'listed'}")
    rec.wake_forks(*key)  # forks waiting for this session to be Ready


async def claim(rec: Reconciler, type: str | None, body: Body) -> None:
    if not _ours(rec, body, "claims", type):
        return
    owner = rec.session_for_claim(body)
    unknown_owner = owner is None or owner not in rec.cache.sessions
    if type is None:
        rec.relisted("claims")
        if not unknown_owner and rec.unchanged("claims", _key(body), body):
            return  # as the cache has it (start-up listing): the session's own listing runs its pass
    if type == "DELETED":
        rec.cache.claims.pop(_key(body), None)
    else:
        rec.cache.remember_claim(_key(body), body)
    if type != "DELETED" and unknown_owner and await rec.collect_orphan(body):
        return
    if owner is not None:
        await rec.reconcile(owner, cause=f"claim {type or 'listed'}")


async def sandbox(rec: Reconciler, type: str | None, body: Body) -> None:
    if not _ours(rec, body, "sandboxes", type):
        return
    owner = rec.session_for_sandbox(body)
    if type is None:
        rec.relisted("sandboxes")
        if owner is not None and rec.unchanged("sandboxes", _key(body), body):
            return  # as the cache has it (start-up listing): the session's own listing runs its pass
    if type == "DELETED":
        rec.cache.sandboxes.pop(_key(body), None)
    elif owner is not None:
        rec.cache.remember_sandbox(_key(body), body)
    if owner is not None:
        await rec.reconcile(owner, cause=f"sandbox {type or 'listed'}")


async def network_policy(rec: Reconciler, type: str | None, body: Body) -> None:
    """A session's NetworkPolicy changed or went (someone edited or deleted it): its session puts it back."""
    key = _key(body)
    if not rec.caches(key[0]):
        return
    before = rec.cache.network_policies.get(key)
    if type == "DELETED":
        rec.cache.network_policies.pop(key, None)
    else:
        rec.cache.remember_network_policy(key, body)
    owner = rec.session_for_network_policy(body)
    changed = type == "DELETED" or before is None or before.get("spec") != body.get("spec")
    if owner is not None and changed:
        await rec.reconcile(owner, cause=f"network policy {type or 'listed'}")


def warm_pool(rec: Reconciler, type: str | None, body: Body) -> None:
    """A pool appearing or going, or its template changing, moves its namespace's sessions."""
    if type is None:
        rec.relisted("pools")
    key = _key(body)
    known = key in rec.cache.pools
    template = rec.cache.pool_templates.get(key)
    if type == "DELETED":
        rec.cache.forget_pool(key)
    else:
        rec.remember_pool(key, body)
    if known != (key in rec.cache.pools):
        rec.trigger_namespace(key[0], cause="warm pool appeared or went")
    elif template != rec.cache.pool_templates.get(key):
        rec.trigger_namespace(key[0], cause="warm pool's template changed")


def template(rec: Reconciler, type: str | None, body: Body) -> None:
    """A SandboxTemplate's network settings changed: its namespace's sessions judge NetworkIsolated again."""
    if type is None:
        rec.relisted("templates")
    key = _key(body)
    before = rec.cache.templates.get(key)
    if type == "DELETED":
        rec.cache.templates.pop(key, None)
    else:
        rec.cache.remember_template(key, body)
    after = rec.cache.templates.get(key)
    if (before or {}).get("spec") != (after or {}).get("spec"):
        rec.trigger_namespace(key[0], cause=f"template {key[1]} network settings changed")


async def policy(rec: Reconciler, type: str | None, body: Body) -> None:
    """A policy's spec changed: its namespace's sessions are judged again; its status says what it selects."""
    if type is None:
        rec.relisted("policies")
    namespace, name = _key(body)
    policies = rec.cache.policies[namespace]
    before = policies.get(name, {}).get("spec")
    if type == "DELETED":
        policies.pop(name, None)
    else:
        policies[name] = body
    if before != (policies.get(name) or {}).get("spec"):
        rec.trigger_namespace(namespace, cause=f"policy {name} changed")
    if type != "DELETED":
        await rec.update_policy_status(namespace, name)
