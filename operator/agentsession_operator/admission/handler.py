"""The validating webhook's handler: AgentSessionPolicy enforced when an AgentSession is written.

It gathers what the reconciler already keeps (its cache of policies, agent-sandbox's label allowlist)
and decides with admission/rules.py, which reuses decisions/policy.py and policy_violations.py: one
source of truth for every rule. The shipped configuration fails closed (config/webhook/: failurePolicy Fail)
when no operator answers, and so does this handler when the check itself fails: the request is refused (500),
saying so, and the writer tries again; the reconciler re-checks each session at every pass besides.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

import kopf

from agentsession_api import names
from agentsession_operator.admission import rules as admission
from agentsession_operator.admission import server as webhook_server
from agentsession_operator.decisions import fork, policy, quota
from agentsession_operator.decisions.selectors import watched
from agentsession_operator.infra.logs import logger

if TYPE_CHECKING:
    from agentsession_operator.kube.reconciler import Reconciler

HANDLER_ID = "policy"

_log = logger(component="webhook")


async def _places(reconciler: Any, namespace: str) -> list[quota.Rank]:
    """The places held in the namespace (maxSessionsPerNamespace), with the creates admitted here that the
    cache does not have yet: a burst of creates outruns the watch. Only read under such a cap. A replica
    that does not cache the namespace (another's shard, --shards) lists its sessions live instead: its own
    cache would show no place at all."""
    if not reconciler.caches(namespace):
        listed = await reconciler.kube.list_sessions(namespace)
        live = [quota.rank(s) for s in listed if quota.holds_place(s)]
        names = {name for _, name in live}
        pending = [name for name in reconciler.admitted.pending(namespace, {}) if name not in names]
        return sorted([*live, *(("", name) for name in pending)])
    cached = reconciler.cache.places.in_namespace(namespace)
    pending = reconciler.admitted.pending(namespace, reconciler.cache.sessions)
    return sorted([*cached, *(("", name) for name in pending)])


async def _sessions_for_count(reconciler: Any, groups: list[tuple[str, str]], namespace: str) -> list[dict[str, Any]]:
    """The namespace's sessions in these capped label groups, read live (the cache may lag a burst of creates)."""
    found: dict[str, dict[str, Any]] = {}
    try:
        for key, value in groups:
            selector = key if value == policy.ANY_VALUE else f"{key}={value}"  # countAcrossValues: carrying key
            for other in await reconciler.kube.list_sessions(namespace, selector=selector):
                found[other["metadata"].get("uid") or other["metadata"]["name"]] = other
    except Exception as exc:  # the cache is the fallback: slightly stale beats not checking
        if not reconciler.caches(namespace):
            raise  # another replica's shard (--shards): this one caches none of its sessions
        _log.warning("listing sessions for maxSessionsPerLabel failed; using the cache", error=str(exc)[:300])
        return reconciler.cache.bodies_in(namespace)
    return list(found.values())


async def _fork_source(reconciler: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """The source of a fork, from the cache, else read live (a source created a moment ago)."""
    cached = reconciler.cache.sessions.get((namespace, name))
    return dict(cached) if cached is not None else await reconciler.kube.get_session(namespace, name)


async def _unrecorded_ancestors(reconciler: Any, namespace: str, source: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The source's own sources while each is a fork that has recorded no lineage yet (made a moment ago,
    not reconciled): read along the chain, at most names.MAX_LINEAGE deep (the reconciler records the rest)."""
    found: list[dict[str, Any]] = []
    current = source
    seen = {((source or {}).get("metadata") or {}).get("name")}
    while current is not None and len(found) < names.MAX_LINEAGE:
        parent = fork.needs_older(current)
        if not parent or parent in seen:
            break
        seen.add(parent)
        current = await _fork_source(reconciler, namespace, parent)
        if current is not None:
            found.append(current)
    return found


class Settings(Protocol):
    """What the handler reads of the operator's settings (settings.py's OperatorSettings, a layer above)."""

    @property
    def namespace(self) -> tuple[str, ...]: ...
    @property
    def max_sessions_per_namespace(self) -> int: ...


class OperatorState(Protocol):
    """What the handler reads of the operator's state (handlers/state.py's, which kopf's memo carries)."""

    webhook: webhook_server.WebhookConfig | None
    settings: Settings
    reconciler: Reconciler | None


def _state(memo: kopf.Memo) -> OperatorState:
    state = memo.get("state")
    if state is None:
        raise RuntimeError("the operator has not started: kopf's memo carries no state (the CLI puts it there)")
    return cast(OperatorState, state)


async def validate_session(
    *,
    body: kopf.Body,
    memo: kopf.Memo,
    warnings: list[str],
    old: kopf.Body | None = None,
    operation: str | None = None,
    sslpeer: Mapping[str, Any] | None = None,
    dryrun: bool = False,
    **_: Any,
) -> None:
    """Refuse an AgentSession CREATE/UPDATE that breaks an applicable AgentSessionPolicy."""
    state = _state(memo)
    denied = webhook_server.caller_refusal(state.webhook, sslpeer)
    if denied is not None:  # before anything is read: such a caller learns nothing of the policies
        _log.warning("webhook call refused", reason=denied, peer=webhook_server.peer_names(sslpeer))
        raise kopf.AdmissionError(denied, code=403)
    session = dict(body)
    meta = session.get("metadata") or {}
    namespace = meta.get("namespace")
    # Sessions in namespaces the operator does not watch are not its to judge.
    if not namespace or not watched(namespace, state.settings.namespace) or operation not in ("CREATE", "UPDATE"):
        return
    capped = False
    try:
        reconciler = state.reconciler
        if reconciler is None:
            raise RuntimeError("the operator has not started: no reconciler yet (the startup handler builds it)")
        policies = list(reconciler.cache.policies.get(namespace, {}).values())
        domains = await reconciler.label_domains()
        previous = dict(old) if old is not None else None
        fork_problems: list[str] = []
        source_name = fork.source_name(session) if operation == "CREATE" else None
        if source_name:
            # Same namespace by construction (forkFrom has no namespace field); the source must exist.
            source = await _fork_source(reconciler, namespace, source_name)
            fork_problems = fork.admission_problems(session, source)
            # Policies judge the fork with the source's volumes, (unless it names one) its warm pool, and
            # every policy of the sessions its data came from (decisions/lineage.py).
            older = await _unrecorded_ancestors(reconciler, namespace, source)
            session = fork.admission_view(session, source, *older)
        others: list[dict[str, Any]] = []
        groups = admission.counted_groups(session, policies, operation, previous)
        if groups:
            others = await _sessions_for_count(reconciler, groups, namespace)
        cap = state.settings.max_sessions_per_namespace
        capped = operation == "CREATE" and quota.namespace_limit(namespace, policies, cap) is not None
        places = await _places(reconciler, namespace) if capped else []
        violations = admission.review(
            session, policies, domains, others, operation, old=previous, places=places, namespace_default=cap
        )
        if previous is not None and not violations:
            standing = admission.standing_violations(session, policies, domains, previous)
            warnings.extend(f"AgentSessionPolicy (not enforced on this update): {v}" for v in standing)
    except Exception as exc:  # fail closed: a rule unchecked here may have no backstop at reconcile
        _log.exception("admission check failed; refusing", namespace=namespace, session=meta.get("name"))
        raise kopf.AdmissionError(
            f"AgentSessionPolicy could not be checked ({type(exc).__name__}: {str(exc)[:300]}): the write is "
            "refused, not admitted unchecked; try again (the agentsession operator's log has the cause)",
            code=500,
        ) from exc
    if fork_problems:
        _log.info("admission refused a fork", namespace=namespace, session=meta.get("name"), problems=fork_problems)
        raise kopf.AdmissionError(admission.fork_refusal_message(fork_problems), code=422)
    if violations:
        _log.info(
            "admission refused",
            namespace=namespace,
            session=meta.get("name"),
            operation=operation,
            violations=violations,
        )
        raise kopf.AdmissionError(admission.refusal_message(violations), code=422)
    if capped and meta.get("name") and not dryrun:  # a dry run stores nothing: it holds no place
        reconciler.admitted.add((namespace, str(meta["name"])))


def register(registry: kopf.OperatorRegistry) -> None:
    """Register :func:`validate_session` (only when the webhook is served: kopf refuses it without a server)."""
    kopf.on.validate(
        names.GROUP,
        names.VERSION,
        names.SESSION_PLURAL,
        id=HANDLER_ID,
        operations=["CREATE", "UPDATE"],
        ignore_failures=True,  # only read by kopf's managed mode, which is off (the configuration is shipped)
        registry=registry,
    )(validate_session)
