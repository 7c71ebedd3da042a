"""Reconcile one AgentSession: observe (cache, then the API), decide (decisions/), act (client.py).

Level-triggered: every trigger (the session's own events, its claim's or Sandbox's events, a policy or
pool change, a deadline) runs the same full pass, and a pass that finds nothing to change writes
nothing, so the operator's own status writes settle after one extra pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client.rest import ApiException

from agentsession_api import names, phases
from agentsession_api.activity import report_key
from agentsession_api.phases import Phase
from agentsession_api.timestamps import parse_time
from agentsession_operator import constants as c
from agentsession_operator.decisions import lifecycle, naming, policy, refusals, retention
from agentsession_operator.decisions import status as session_status
from agentsession_operator.decisions.actions import (
    Action,
    CreateClaim,
    DeleteClaim,
    PatchClaim,
    PatchSandbox,
    PatchStatus,
    ScheduleCheck,
    patch_changes,
    reconcile_actions,
)
from agentsession_operator.decisions.ownership import is_owned_by
from agentsession_operator.decisions.selectors import watched
from agentsession_operator.infra import metrics
from agentsession_operator.infra.logs import logger
from agentsession_operator.kube.cache import Cache, Key
from agentsession_operator.kube.client import Kube
from agentsession_operator.kube.scheduler import DeadlineScheduler

LABEL_DOMAINS_TTL = 60.0  # seconds between reads of agent-sandbox-config
MAX_RETRY_DELAY = 60.0


@dataclass
class Config:
    agent_sandbox_namespace: str = "agent-sandbox-system"
    agent_sandbox_configmap: str = "agent-sandbox-config"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class NotLeader(Exception):
    """This replica is (no longer) the leader: it must not write; the leader's pass covers it."""


def _phase(status: dict[str, Any] | None) -> str | None:
    return (status or {}).get("phase")


class Reconciler:
    def __init__(self, kube: Kube, config: Config | None = None) -> None:
        self.kube = kube
        self.config = config or Config()
        self.cache = Cache()
        self.scheduler = DeadlineScheduler(self._on_deadline)
        self._locks: dict[Key, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._failures: dict[Key, int] = defaultdict(int)
        self._phases: dict[Key, str] = {}
        self._label_domains: tuple[float, list[str]] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._dirty: dict[Key, tuple[str, bool]] = {}
        self._create_refused: set[Key] = set()  # sessions whose claim create met an existing claim
        # Leadership gate (kube/leader.py): a standby keeps its cache current but never writes.
        self.is_leader: Callable[[], bool] = lambda: True

    def _fence(self) -> None:
        if not self.is_leader():
            raise NotLeader()

    async def take_over(self) -> None:
        """Just became leader: reconcile every known session and look for orphans the standby ignored."""
        now = _now()
        for key in list(self.cache.sessions):
            self.scheduler.schedule(key, now)
        for claim in list(self.cache.claims.values()):
            session = self.session_for_claim(claim)
            if session is None or session not in self.cache.sessions:
                with contextlib.suppress(Exception):  # the next claim event retries
                    await self.collect_orphan(dict(claim))

    def _event(self, obj: dict[str, Any], reason: str, message: str, type_: str = "Normal") -> None:
        """Post an Event in the background: a pass never waits for (or fails on) an Event."""
        task = asyncio.create_task(self.kube.event(obj, reason, message, type_))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ---- triggers ----------------------------------------------------------------------------
    async def _on_deadline(self, key: Key, at: dt.datetime) -> None:
        lag = (_now() - at).total_seconds()
        await self.reconcile(key, cause="deadline", deadline_lag=lag)

    def trigger_namespace(self, namespace: str, cause: str) -> None:
        """Reconcile every known session of a namespace soon (a policy or pool changed)."""
        now = _now()
        for key in self.cache.sessions_in(namespace):
            self.scheduler.schedule(key, now)

    def slot_may_have_freed(self, namespace: str) -> None:
        """A session of the namespace was deleted or finished: sessions waiting on maxSessionsPerLabel
        (Failed, PolicyViolation, no claim) are judged again now. Only those, and only when a policy of
        the namespace sets a cap, so thousands of finishing sessions cause no storm of passes."""
        capped = any(
            ((p.get("spec") or {}).get("cleanup") or {}).get("maxSessionsPerLabel")
            for p in self.cache.policies.get(namespace, {}).values()
        )
        if not capped:
            return
        now = _now()
        for key in self.cache.sessions_in(namespace):
            status = self.cache.sessions[key].get("status") or {}
            failed: dict[str, Any] = next(
                (x for x in status.get("conditions") or [] if x.get("type") == phases.COND_FAILED), {}
            )
            waiting = status.get("phase") == Phase.FAILED and not status.get("claimName")
            if waiting and failed.get("reason") == phases.REASON_POLICY_VIOLATION:
                self.scheduler.schedule(key, now)

    async def update_policy_status(self, namespace: str, name: str) -> None:
        """Valid, matchedSessions, observedGeneration of one policy (written when they change)."""
        body = self.cache.policies.get(namespace, {}).get(name)
        if body is None:
            return
        status = policy.policy_status(body, self.cache.bodies_in(namespace), _now())
        if patch_changes(body.get("status") or {}, status):
            await self.kube.patch_policy_status(namespace, name, status)

    def session_for_claim(self, claim: dict[str, Any]) -> Key | None:
        for ref in claim["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == names.SESSION_KIND and ref.get("apiVersion", "").startswith(f"{names.GROUP}/"):
                return claim["metadata"]["namespace"], ref["name"]
        return None

    def session_for_sandbox(self, sandbox: dict[str, Any]) -> Key | None:
        namespace = sandbox["metadata"]["namespace"]
        for ref in sandbox["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == c.CLAIM_KIND:
                claim = self.cache.claims.get((namespace, ref["name"]))
                if claim is not None:
                    return self.session_for_claim(claim)
        return None

    async def collect_orphan(self, claim: dict[str, Any]) -> bool:
        """Delete a claim labelled as ours whose owner session (by UID) a live read shows is gone.

        Never by label alone: the owner is the AgentSession ownerReference (or, lacking one, the
        session-uid label), and the verdict comes from the API, not the cache. True when deleted.
        """
        meta = claim["metadata"]
        if meta.get("deletionTimestamp") or not self.is_leader():
            return False
        owner = next((r for r in meta.get("ownerReferences") or [] if r.get("kind") == names.SESSION_KIND), None)
        labels = meta.get("labels") or {}
        owner_uid = owner["uid"] if owner else labels.get(names.LABEL_SESSION_UID)
        owner_name = owner["name"] if owner else None
        if not owner_uid:
            return False  # nothing names an owner: not provably ours, leave it alone
        namespace = meta["namespace"]
        if owner_name is None:
            matches = [s for s in await self.kube.list_sessions(namespace) if s["metadata"]["uid"] == owner_uid]
            alive = bool(matches)
        else:
            session = await self.kube.get_session(namespace, owner_name)
            alive = session is not None and session["metadata"]["uid"] == owner_uid
        if alive:
            return False
        self._fence()
        if await self.kube.delete_claim(namespace, meta["name"], meta.get("uid")):
            metrics.CLAIMS_DELETED.labels(reason="Orphaned").inc()
            logger(namespace=namespace, claim=meta["name"]).info("orphan claim deleted", owner_uid=owner_uid)
        return True

    async def prime(self, namespaces: tuple[str, ...] = ()) -> None:
        """List every policy and warm pool once, before any session is acted on (see Cache.loaded).

        kopf runs startup handlers before its watches: without this, a session's first pass could run before
        the policies' and create a claim a policy forbids. A failed list fails the start (and kopf retries it)
        rather than act without policies."""
        for body in await _listing(self.kube.list_policies, None):
            meta = body["metadata"]
            if watched(meta.get("namespace"), namespaces):
                self.cache.policies[meta["namespace"]][meta["name"]] = dict(body)
        for body in await _listing(self.kube.list_warm_pools):
            self.cache.pools.add((body["metadata"]["namespace"], body["metadata"]["name"]))
        self.cache.loaded = True
        logger().info("policies and warm pools loaded", policies=sum(map(len, self.cache.policies.values())))

    # ---- observation -------------------------------------------------------------------------
    async def label_domains(self) -> list[str]:
        cached = self._label_domains
        if cached is None or time.monotonic() - cached[0] > LABEL_DOMAINS_TTL:
            domains = await self.kube.allowed_label_domains(
                self.config.agent_sandbox_namespace, self.config.agent_sandbox_configmap
            )
            cached = (time.monotonic(), domains)
            self._label_domains = cached
        return cached[1]

    def _effective(self, session: dict[str, Any]) -> policy.EffectivePolicy:
        namespace = session["metadata"]["namespace"]
        return policy.effective_policy_for(session, list(self.cache.policies.get(namespace, {}).values()))

    async def _observe_claim(self, namespace: str, name: str, session: dict[str, Any]) -> dict[str, Any] | None:
        claim = self.cache.claims.get((namespace, name))
        if claim is not None:
            return claim
        # A session whose status names no claim has never had one created by a pass that finished (a
        # pass creates the claim, then writes claimName): skip the GET, the one API round trip before a
        # new session's claim create. The cache remembers our own creates; a claim that exists anyway (a
        # crashed pass's, or someone else's) answers the create with 409, and from then on it is read.
        key = (namespace, session["metadata"]["name"])
        if not (session.get("status") or {}).get("claimName") and key not in self._create_refused:
            return None
        # The cache may lag our own create: ask the API before deciding a claim is missing.
        return await self.kube.get_claim(namespace, name)

    async def _observe_sandbox(self, namespace: str, claim: dict[str, Any] | None) -> dict[str, Any] | None:
        bound = (((claim or {}).get("status") or {}).get("sandbox") or {}).get("name")
        if not bound:
            return None
        sandbox = self.cache.sandboxes.get((namespace, bound))
        return sandbox if sandbox is not None else await self.kube.get_sandbox(namespace, bound)

    # ---- the pass ----------------------------------------------------------------------------
    async def reconcile(self, key: Key, cause: str, deadline_lag: float | None = None, fresh: bool = False) -> None:
        """One pass. `fresh` re-reads the session from the API first (deadlines act on the newest state);
        otherwise the newest body the watch or our own writes delivered is used."""
        if not self.is_leader():
            return  # take_over() reconciles every session when this replica becomes leader
        if not self.cache.loaded:
            # Never judge a session without its policies: try again once they are loaded.
            self.scheduler.schedule(key, _now() + dt.timedelta(seconds=1))
            return
        lock = self._locks[key]
        if lock.locked():
            # A pass is running: it will run once more for everything that arrived meanwhile.
            _, was_fresh = self._dirty.get(key, (cause, False))
            self._dirty[key] = (cause, was_fresh or fresh or deadline_lag is not None)
            return
        async with lock:
            await self._pass(key, cause, deadline_lag, fresh)
            while key in self._dirty:
                cause, fresh = self._dirty.pop(key)
                await self._pass(key, cause, None, fresh)

    async def _pass(self, key: Key, cause: str, deadline_lag: float | None, fresh: bool) -> None:
        started = time.monotonic()
        try:
            await self._reconcile(key, cause, deadline_lag, fresh or deadline_lag is not None)
            self._failures.pop(key, None)
        except NotLeader:
            logger(namespace=key[0], session=key[1]).info("not leader: pass abandoned before writing", cause=cause)
        except Exception as exc:
            metrics.RECONCILE_ERRORS.labels(kind=type(exc).__name__).inc()
            failures = self._failures[key] = self._failures[key] + 1
            delay = min(MAX_RETRY_DELAY, 0.5 * 2**failures)
            logger(namespace=key[0], session=key[1]).warning(
                "reconcile failed; retrying", error=str(exc), cause=cause, retry_in=delay
            )
            self.scheduler.schedule(key, _now() + dt.timedelta(seconds=delay))
        finally:
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)

    async def _reconcile(self, key: Key, cause: str, deadline_lag: float | None, fresh: bool) -> None:
        namespace, name = key
        session = None if fresh else self.cache.sessions.get(key)
        if session is None:
            session = await self.kube.get_session(namespace, name)
        if session is None:
            self.forget(key)
            return
        self.cache.remember_session(key, session)
        now = _now()
        uid = session["metadata"]["uid"]
        log = logger(namespace=namespace, session=name, cause=cause)

        # Activity: the operator stamps it with its own clock when it first sees a new report.
        status_extra: dict[str, Any] = {}
        report = (session["metadata"].get("annotations") or {}).get(names.ANNOTATION_ACTIVITY)
        status = dict(session.get("status") or {})
        # Only a bounded key of the annotation goes to status (a long one made every status write fail).
        if isinstance(report, str) and report and report_key(report) != status.get("lastActivityReport"):
            busy_cap = policy.resolve(session, self._effective(session)).max_idle_timeout
            observed = lifecycle.activity_patch(report, now, busy_cap)
            status_extra["lastActivityReport"] = report_key(report)
            if observed is not None:
                status.update(observed)
                status_extra.update(observed)
            session = {**session, "status": status}

        claim_name = naming.claim_name(name, uid)
        claim = await self._observe_claim(namespace, claim_name, session)
        sandbox = await self._observe_sandbox(namespace, claim)
        effective = self._effective(session)
        resolved = policy.resolve(session, effective)
        warm_pool_exists = True
        if claim is None and resolved.warm_pool:
            warm_pool_exists = (namespace, resolved.warm_pool) in self.cache.pools or (
                await self.kube.get_warm_pool(namespace, resolved.warm_pool) is not None
            )
        # Every pass, claim or not: PolicyCompliant is always the current verdict, and a running session
        # that breaks a policy is stopped (decisions.actions).
        violations = policy.violations(session, effective, await self.label_domains(), running=claim is not None)
        if claim is None:
            # maxSessionsPerLabel by creation order, so concurrent creations agree on who is over.
            others = self.cache.bodies_in(namespace)
            violations += policy.session_limit_violations(session, effective, others, only_earlier=True)

        actions = reconcile_actions(
            session,
            claim,
            sandbox,
            now,
            warm_pool_exists=warm_pool_exists,
            effective=effective,
            violations=violations,
        )
        status_patch: dict[str, Any] | None = None
        created: dict[str, Any] | None = None
        for action in actions:
            if isinstance(action, PatchStatus):
                status_patch = {**action.patch, **status_extra}
            elif isinstance(action, ScheduleCheck):
                self.scheduler.schedule(key, action.at)
            elif isinstance(action, CreateClaim | PatchClaim):
                try:
                    await self._act(action, session, claim, log, deadline_lag)
                except ApiException as exc:
                    if not refusals.is_refusal(exc.status):
                        raise
                    # Say why on the status before the pass fails (and is retried with backoff).
                    planned = next((a.patch for a in actions if isinstance(a, PatchStatus)), None)
                    verb = "create" if isinstance(action, CreateClaim) else "patch"
                    message = refusals.api_message(exc.body)
                    patch = refusals.refusal_status(session, planned, verb, int(exc.status), message, now)
                    await self._write_status(key, session, {**patch, **status_extra}, log)
                    raise
                if isinstance(action, CreateClaim):
                    created = self.cache.claims.get((namespace, action.manifest["metadata"]["name"]))
            else:
                await self._act(action, session, claim, log, deadline_lag)
        if created is not None and is_owned_by(created, uid):
            # The status the claim's first watch event would lead to (Provisioning, with the claim's
            # name), written now: otherwise this pass writes Pending and the next pass Provisioning,
            # one more status write (~8 ms, serialized per session) before Ready. Judged with the
            # claim, as that next pass does; it then finds nothing to change.
            running = policy.violations(session, effective, await self.label_domains(), running=True)
            again = reconcile_actions(session, created, None, now, effective=effective, violations=running)
            provisioning = next((a.patch for a in again if isinstance(a, PatchStatus)), None)
            if provisioning is not None:
                status_patch = {**provisioning, **status_extra}
        if status_patch is None and status_extra:
            status_patch = status_extra
        if status_patch is not None:
            await self._write_status(key, session, status_patch, log)
        await self._retention(key, session, status_patch, effective, now)

    async def _act(
        self,
        action: Action,
        session: dict[str, Any],
        claim: dict[str, Any] | None,
        log: Any,
        deadline_lag: float | None,
    ) -> None:
        namespace, name = session["metadata"]["namespace"], session["metadata"]["name"]
        self._fence()
        if isinstance(action, CreateClaim):
            created = await self.kube.create_claim(action.manifest)
            claim_name = action.manifest["metadata"]["name"]
            if created is None:
                self._create_refused.add((namespace, name))
                existing = await self.kube.get_claim(namespace, claim_name)
                if existing is not None and is_owned_by(existing, session["metadata"]["uid"]):
                    self.cache.remember_claim((namespace, claim_name), existing)
                    log.info("claim exists already", claim=claim_name)
                else:
                    log.warning("a SandboxClaim of that name belongs to someone else", claim=claim_name)
                # Either way the next pass sees the claim and decides with it.
                self.scheduler.schedule((namespace, name), _now())
                return
            self.cache.remember_claim((namespace, claim_name), created)
            metrics.CLAIMS_CREATED.inc()
            log.info("claim created", claim=claim_name)
            self._event(session, "ClaimCreated", f"Created SandboxClaim {claim_name}")
        elif isinstance(action, PatchClaim):
            await self.kube.patch_claim(namespace, action.name, action.patch)
            log.info("claim patched", claim=action.name, patch=action.patch)
            shutdown = ((action.patch.get("spec") or {}).get("lifecycle") or {}).get("shutdownTime")
            if shutdown:
                self._event(session, "ExpiryChanged", f"The session now expires at {shutdown} (ttl or policy changed)")
        elif isinstance(action, DeleteClaim):
            uid = (claim or {}).get("metadata", {}).get("uid")
            if await self.kube.delete_claim(namespace, action.name, uid):
                metrics.CLAIMS_DELETED.labels(reason=action.reason).inc()
                if deadline_lag is not None:
                    metrics.REAP_LAG.observe(max(deadline_lag, 0.0))
                log.info("claim deleted", claim=action.name, reason=action.reason)
                self._event(session, action.reason, f"Deleted SandboxClaim {action.name} ({action.reason})")
        elif isinstance(action, PatchSandbox):
            await self.kube.patch_sandbox(namespace, action.name, action.patch)
            mode = (action.patch.get("spec") or {}).get("operatingMode", "")
            log.info("sandbox operating mode set", sandbox=action.name, mode=mode)
            if deadline_lag is not None and mode == c.OPERATING_MODE_SUSPENDED:
                metrics.REAP_LAG.observe(max(deadline_lag, 0.0))
            self._event(
                session,
                "Suspended" if mode == c.OPERATING_MODE_SUSPENDED else "Resumed",
                f"Sandbox {action.name} operatingMode set to {mode}",
            )

    async def _write_status(self, key: Key, session: dict[str, Any], patch: dict[str, Any], log: Any) -> None:
        before = _phase(session.get("status"))
        patch = session_status.bounded_status(patch)
        self._fence()
        try:
            written = await self.kube.patch_session_status(key[0], key[1], patch)
        except ApiException as exc:
            if exc.status != 422:
                raise
            # Refused by the schema: never let that freeze the session. Write the phase and the idle
            # clock alone (what reaping reads), say so, and let the pass go on.
            log.warning("status refused by the API server; wrote the minimal status", error=str(exc.reason))
            self._event(session, "StatusRejected", f"status update refused: {str(exc.reason)[:512]}", "Warning")
            patch = session_status.minimal_status(patch)
            self._fence()
            written = await self.kube.patch_session_status(key[0], key[1], patch)
        if written is not None:
            self.cache.remember_session(key, written)
        after = patch.get("phase", before)
        if after and after != self._phases.get(key):
            previous = self._phases.get(key)
            if previous:
                metrics.SESSIONS_BY_PHASE.labels(namespace=key[0], phase=previous).dec()
            metrics.SESSIONS_BY_PHASE.labels(namespace=key[0], phase=after).inc()
            self._phases[key] = after
        if after != before and after in phases.TERMINAL_PHASES:
            self.slot_may_have_freed(key[0])
        if after != before and after:
            ready: dict[str, Any] = next(
                (x for x in patch.get("conditions") or [] if x.get("type") == phases.COND_READY), {}
            )
            message = ready.get("message") or f"phase {after}"
            log.info("phase changed", old=before, new=after, reason=ready.get("reason"), message=message)
            warning = after in (Phase.FAILED,)
            self._event(
                session,
                after if not ready.get("reason") else str(ready["reason"]),
                message,
                "Warning" if warning else "Normal",
            )
            if after == Phase.READY and patch.get("readyAt") and not (session.get("status") or {}).get("readyAt"):
                created = parse_time(session["metadata"].get("creationTimestamp"))
                ready_at = parse_time(patch["readyAt"])
                if created and ready_at:
                    metrics.TIME_TO_READY.observe(max((ready_at - created).total_seconds(), 0.0))

    async def _retention(
        self,
        key: Key,
        session: dict[str, Any],
        patch: dict[str, Any] | None,
        effective: policy.EffectivePolicy,
        now: dt.datetime,
    ) -> None:
        """cleanup.deleteFinishedAfter: delete finished sessions once their time has come."""
        after = effective.delete_finished_after.value if effective.delete_finished_after else None
        if after is None:
            return
        view = {**session, "status": {**(session.get("status") or {}), **(patch or {})}}
        if retention.is_due(view, after, now):
            self._fence()
            await self.kube.delete_session(key[0], key[1], session["metadata"]["uid"])
            logger(namespace=key[0], session=key[1]).info("finished session deleted by retention", after=str(after))
            return
        when = retention.deletion_time(view, after)
        if when is not None:
            self.scheduler.schedule(key, when)

    def forget(self, key: Key) -> None:
        self.cache.sessions.pop(key, None)
        self.scheduler.cancel(key)
        self._locks.pop(key, None)
        self._create_refused.discard(key)
        phase = self._phases.pop(key, None)
        if phase:
            metrics.SESSIONS_BY_PHASE.labels(namespace=key[0], phase=phase).dec()
        self.slot_may_have_freed(key[0])


PRIME_PATIENCE = 60.0
"""How long the start-up listing waits out an API server that is not ready to serve it (seconds)."""


async def _listing(call: Callable[..., Any], *args: Any) -> list[dict[str, Any]]:
    """A start-up list, waiting out 429 and 5xx with the server's Retry-After (bounded): right after a CRD
    is created its storage answers 429 "storage is (re)initializing", and failing the startup handler
    would make kopf retry it only a minute later, with the operator unhealthy meanwhile."""
    deadline = time.monotonic() + PRIME_PATIENCE
    while True:
        try:
            return list(await call(*args))
        except ApiException as exc:
            if not (exc.status == 429 or (exc.status or 0) >= 500) or time.monotonic() >= deadline:
                raise
            retry_after = str((getattr(exc, "headers", None) or {}).get("Retry-After") or "")
            delay = float(retry_after) if retry_after.isdigit() else 1.0
            await asyncio.sleep(min(max(delay, 0.2), 5.0))
