"""One pass over one session: observe (the cache, then the API where the cache may lag), decide
(decisions/decide.py, once), act (kube/acting.py, kube/status_writer.py). Nothing here judges."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from agentsession_api.phases import Phase
from agentsession_operator.decisions import decide, fork, naming, network, quota, refusals
from agentsession_operator.decisions.actions import (
    DEFAULT_EXPIRY_WARNING,
    PROGRESS_CHECK,
    ApplyNetworkPolicy,
    CreateClaim,
    PatchClaim,
    ScheduleCheck,
    Warn,
)
from agentsession_operator.infra.logs import logger
from agentsession_operator.kube import clock
from agentsession_operator.kube.acting import Actor
from agentsession_operator.kube.api import ApiException
from agentsession_operator.kube.cache import Cache, Key
from agentsession_operator.kube.client import Kube
from agentsession_operator.kube.forks import fork_inputs
from agentsession_operator.kube.missing_pools import MissingPools
from agentsession_operator.kube.node_agent import TOKEN_PATH
from agentsession_operator.kube.scheduler import DeadlineScheduler
from agentsession_operator.kube.session_records import Records
from agentsession_operator.kube.status_writer import EventPoster, StatusWriter

LABEL_DOMAINS_TTL = 60.0  # seconds between reads of agent-sandbox-config
FORK_WAIT_CAP = 16.0
"""Seconds at most between two looks of a fork waiting on its source: decide's 2 s doubled per look that
found it still waiting (2, 4, 8, 16, 16, ...), reset when the source changes (reconciler.wake_forks). A
waiting fork's look reads its source's Sandbox and PVCs from the API: forever every 2 s was a tenant's
way to load the operator and the API server with forks of a source that never becomes Ready."""
AGAIN_DELAY = 0.2  # seconds before the pass a claim create's 409 asks for


@dataclass
class Config:
    agent_sandbox_namespace: str = "agent-sandbox-system"
    agent_sandbox_configmap: str = "agent-sandbox-config"
    network: network.NetworkSettings = field(default_factory=network.NetworkSettings)
    expiry_warning: dt.timedelta | None = DEFAULT_EXPIRY_WARNING
    """How long before its expiry a session gets an ExpiringSoon Warning Event (None: never)."""
    node_agent: str | None = None
    """NAMESPACE/selector of the node agent's pods (idleAction Hibernate's checkpoints); None: off."""
    node_agent_token: Path = TOKEN_PATH
    """The operator's token for every node agent (audience-bound), when it has no account to mint per node."""
    node_agent_account: str = ""
    """NAMESPACE/ServiceAccount: the operator mints each node's agent its own token (kube/node_agent.py)."""
    node_agent_ca_secret: tuple[str, str] | None = None
    """NAMESPACE, NAME of the node agents' CA (kube/agent_certificates.py); None: nothing is sent to agents."""
    max_checkpoint_bytes: int = 512 * 1024 * 1024
    max_sessions_per_namespace: int = quota.DEFAULT_MAX_SESSIONS_PER_NAMESPACE
    """The cap of a namespace no AgentSessionPolicy caps (0: none)."""


class Sessions(Protocol):
    """What a pass tells the reconciler (kube/reconciler.py) about the session it read."""

    def remember_session(self, key: Key, body: dict[str, Any]) -> None: ...
    def forget(self, key: Key) -> None: ...
    def pass_soon(self, key: Key, cause: str, at: dt.datetime | None = None) -> None: ...


@dataclass
class Rooms:
    """The pass's collaborators, built once by the reconciler."""

    kube: Kube
    cache: Cache
    config: Config
    scheduler: DeadlineScheduler
    sessions: Sessions
    actor: Actor
    writer: StatusWriter
    event: EventPoster
    fence: Callable[[], None]
    records: Records = field(default_factory=Records)


class SessionPass:
    def __init__(self, rooms: Rooms) -> None:
        self.r = rooms
        self.records = rooms.records  # a provisioning session's last progress write, a waiting fork's looks
        self._label_domains: tuple[float, list[str]] | None = None
        self.missing_pools = MissingPools(self._pool_exists)

    async def _pool_exists(self, namespace: str, name: str) -> bool:
        return await self.r.kube.get_warm_pool(namespace, name) is not None

    async def run(self, key: Key, cause: str, deadline_lag: float | None, fresh: bool) -> None:
        """Observe, decide, act. `fresh` reads the session from the API first (deadlines act on the newest)."""
        seen = await self.observe(key, fresh)
        if seen is None:
            return
        decision = decide.decide(seen)
        record = self.records.get(key)
        if (
            record is not None
            and record.fork_waits
            and not any(isinstance(a, ScheduleCheck) and a.reason == decide.FORK_WAITING for a in decision.actions)
        ):
            record.fork_waits = 0  # no longer waiting: a later wait starts at decide's delay again
            self.records.prune(key)
        if decision.missing_pool and await self.missing_pools.exists(key[0], decision.missing_pool):
            seen = replace(seen, pools={*seen.pools, decision.missing_pool})
            decision = decide.decide(seen)
        if not fresh and any(isinstance(a, CreateClaim) for a in decision.actions):
            # The cache keeps no env values nor annotation values (kube/projection.session_projection): the claim
            # is built from the session as the API server has it, read once per claim created.
            if self.r.cache.is_deleted(seen.session):
                return  # its DELETED event came while this pass awaited the API
            live = await self.r.kube.get_session(*key)
            if live is None:
                self.r.sessions.forget(key)  # gone before any claim: none is created for it
                return
            if live["metadata"].get("uid") != seen.session["metadata"].get("uid"):
                return  # another session under the name now: its own event brings its pass
            decision = decide.decide(replace(seen, session=live))
        await self.carry_out(key, decision, logger(namespace=key[0], session=key[1], cause=cause), deadline_lag)

    # ---- observe -----------------------------------------------------------------------------
    async def observe(self, key: Key, fresh: bool) -> decide.Observed | None:
        """Everything the pass decides on. None: the session is gone (and forgotten)."""
        r = self.r
        namespace, name = key
        session = None if fresh else r.cache.sessions.get(key)
        if session is None:
            session = await r.kube.get_session(namespace, name)
        if session is None or r.cache.is_deleted(session):
            r.sessions.forget(key)
            return None
        r.sessions.remember_session(key, session)
        claim_name = naming.claim_name(name, session["metadata"]["uid"])
        claim = await self._claim(namespace, claim_name, session)
        if claim is None and not fresh and await self._gone(key, session):
            return None
        status = session.get("status") or {}
        source = fork.source_name(session)
        cached_source = r.cache.sessions.get((namespace, source or "")) if claim is not None and source else None
        return decide.Observed(
            session=session,
            claim=claim,
            sandbox=await self._sandbox(namespace, claim),
            now=clock.now(),
            policies=list(r.cache.policies.get(namespace, {}).values()),
            pools={pool for ns, pool in r.cache.pools if ns == namespace},
            label_domains=await self.label_domains(),
            peers=r.cache.scan_bodies_in(namespace),
            places=r.cache.places.in_namespace(namespace),
            fork_inputs=await fork_inputs(r.kube, r.cache, session)
            if claim is None and source and not status.get("claimName")
            else None,
            fork_source=dict(cached_source) if cached_source is not None else None,
            network_policy=r.cache.network_policies.get((namespace, network.policy_name(claim_name))),
            network_settings=r.config.network,
            template_policy=r.cache.template_policy_of_pool((namespace, _pool_of(claim))) if claim else None,
            template_identity=r.cache.template_identity_of_pool((namespace, _pool_of(claim))) if claim else None,
            expiry_lead=r.config.expiry_warning,
            namespace_cap=r.config.max_sessions_per_namespace,
            progress_written=record.progress_written if (record := self.records.get(key)) is not None else None,
        )

    async def _claim(self, namespace: str, name: str, session: Mapping[str, Any]) -> dict[str, Any] | None:
        claim = self.r.cache.claims.get((namespace, name))
        if claim is not None:
            return claim
        # A session whose status names no claim has never had one created by a pass that finished (a pass
        # creates the claim, then writes claimName): no GET before a new session's claim create. The cache
        # remembers our own creates; a claim that exists anyway (a crashed pass's, someone else's) answers
        # the create with 409, and from then on it is read.
        key = (namespace, session["metadata"]["name"])
        status = session.get("status") or {}
        record = self.records.get(key)
        if not status.get("claimName") and not (record is not None and record.create_refused):
            return None
        if status.get("phase") == Phase.EXPIRED:
            # Its claim was deleted when it expired: one that still exists would be in the cache (listed at
            # start, then watched), and its own event brings it here to be deleted.
            return None
        # The cache may lag our own create: ask the API before deciding a claim is missing.
        return await self.r.kube.get_claim(namespace, name)

    async def _gone(self, key: Key, session: Mapping[str, Any]) -> bool:
        """The claim the status names is gone. So may the session be: a stale event handled after its
        deletion (the garbage collector took the claim) must not create the claim again. Not asked of an
        Expired session: it stays Expired and never creates a claim."""
        status = session.get("status") or {}
        if not status.get("claimName") or status.get("phase") == Phase.EXPIRED:
            return False
        uid = session["metadata"]["uid"]
        latest = await self.r.kube.get_session(*key)
        if latest is not None and latest["metadata"]["uid"] == uid:
            return False
        self.r.cache.session_deleted(uid)
        self.r.sessions.forget(key)
        if latest is not None:  # the same name, another session: its own pass
            self.r.scheduler.schedule(key, clock.now())
        return True

    async def _sandbox(self, namespace: str, claim: Mapping[str, Any] | None) -> dict[str, Any] | None:
        bound = (((claim or {}).get("status") or {}).get("sandbox") or {}).get("name")
        if not bound:
            return None
        sandbox = self.r.cache.sandboxes.get((namespace, bound))
        return sandbox if sandbox is not None else await self.r.kube.get_sandbox(namespace, bound)

    async def label_domains(self) -> list[str]:
        cached = self._label_domains
        if cached is None or time.monotonic() - cached[0] > LABEL_DOMAINS_TTL:
            config = self.r.config
            domains = await self.r.kube.allowed_label_domains(
                config.agent_sandbox_namespace, config.agent_sandbox_configmap
            )
            cached = (time.monotonic(), domains)
            self._label_domains = cached
        return cached[1]

    # ---- act ---------------------------------------------------------------------------------
    async def carry_out(self, key: Key, decision: decide.Decision, log: Any, deadline_lag: float | None) -> None:
        """Act on a decision, in its order: lineage, the actions, the status, retention."""
        r, session = self.r, decision.view
        if decision.lineage is not None:  # before any claim: once it exists the source is not read again
            await r.writer.write(key, session, {"lineage": decision.lineage}, log)
            log.info("fork lineage recorded", ancestors=[entry.get("name") for entry in decision.lineage])
        again = False
        created: dict[str, Any] | None = None
        for action in decision.actions:
            if isinstance(action, ScheduleCheck):
                self.schedule(key, action)
            elif isinstance(action, Warn):
                log.warning("warning", reason=action.reason, message=action.message)
                r.event(session, action.reason, action.message, "Warning")
            else:
                again = await self._act(key, decision, action, log, deadline_lag) or again
                if isinstance(action, CreateClaim):
                    created = r.cache.claims.get((key[0], action.manifest["metadata"]["name"]))
        if created is not None:
            decision = decide.after_create(decision, created)
            for step in decision.actions:
                if isinstance(step, ApplyNetworkPolicy):
                    await r.actor.apply_network_policy(step, session, log)
                elif isinstance(step, ScheduleCheck):
                    self.schedule(key, step)
        if decision.status is not None:
            await r.writer.write(key, session, decision.status, log)
            if decision.progress:  # a provisioning session's progress: the next waits longer (decisions.actions)
                self.records.of(key).progress_written = decision.observed.now
            elif (record := self.records.get(key)) is not None and record.progress_written is not None:
                record.progress_written = None
                self.records.prune(key)
        await self._retention(key, decision.retention)
        if again:  # last, so no deadline set by this pass replaces it
            r.scheduler.schedule(key, clock.now() + dt.timedelta(seconds=AGAIN_DELAY))

    async def _act(self, key: Key, decision: decide.Decision, action: Any, log: Any, lag: float | None) -> bool:
        claim = decision.observed.claim
        if not isinstance(action, CreateClaim | PatchClaim):
            return await self.r.actor.act(action, decision.view, claim, log, lag)
        try:
            return await self.r.actor.act(action, decision.view, claim, log, lag)
        except ApiException as exc:
            if not refusals.is_refusal(exc.status):
                raise
            # Say why on the status before the pass fails (and is retried with backoff).
            verb = "create" if isinstance(action, CreateClaim) else "patch"
            patch = decide.refused(decision, verb, int(exc.status or 0), refusals.api_message(exc.body))
            await self.r.writer.write(key, decision.view, patch, log)
            raise

    def schedule(self, key: Key, check: ScheduleCheck) -> None:
        if check.reason == PROGRESS_CHECK:
            # Only a provisioning session's deferred progress: its pass reads the cache (no GET first).
            self.r.sessions.pass_soon(key, "provisioning progress", check.at)
        elif check.reason == decide.FORK_WAITING:
            self.r.scheduler.schedule(key, self._fork_backoff(key, check.at))
        else:
            self.r.scheduler.schedule(key, check.at)

    def _fork_backoff(self, key: Key, at: dt.datetime) -> dt.datetime:
        """The next look of a waiting fork: decide's delay doubled per look in a row, capped (FORK_WAIT_CAP);
        a delay already above the cap (a fork that cannot be made, checked every 30 s) is kept."""
        record = self.records.of(key)
        looks, record.fork_waits = record.fork_waits, record.fork_waits + 1
        now = clock.now()
        delay = (at - now).total_seconds()
        if delay >= FORK_WAIT_CAP:
            return at
        return now + dt.timedelta(seconds=min(FORK_WAIT_CAP, delay * 2 ** min(looks, 8)))

    async def _retention(self, key: Key, step: decide.DeleteSession | ScheduleCheck | None) -> None:
        """cleanup.deleteFinishedAfter: delete a finished session once its time has come."""
        if isinstance(step, decide.DeleteSession):
            self.r.fence()
            await self.r.kube.delete_session(key[0], key[1], step.uid)
            log = logger(namespace=key[0], session=key[1])
            log.info("finished session deleted by retention", after=str(step.after))
        elif step is not None:
            self.r.scheduler.schedule(key, step.at)


def _pool_of(claim: Mapping[str, Any]) -> str:
    """The warm pool a claim draws from (agent-sandbox v1.0 claims name a pool, not a template)."""
    return str(((claim.get("spec") or {}).get("warmPoolRef") or {}).get("name") or "")
