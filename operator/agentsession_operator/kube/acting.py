"""Acting on one decided action: the claim, the Sandbox's operating mode, the session's NetworkPolicy,
with the Events and metrics each says."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agentsession_operator import constants as c
from agentsession_operator.decisions import fork
from agentsession_operator.decisions.actions import (
    Action,
    ApplyNetworkPolicy,
    CreateClaim,
    DeleteClaim,
    FinishRestore,
    ForgetCheckpoint,
    HibernateSandbox,
    PatchClaim,
    PatchSandbox,
)
from agentsession_operator.decisions.ownership import is_owned_by
from agentsession_operator.infra import metrics
from agentsession_operator.kube.cache import Cache
from agentsession_operator.kube.client import Kube
from agentsession_operator.kube.hibernation import Hibernator
from agentsession_operator.kube.session_records import Records
from agentsession_operator.kube.status_writer import EventPoster, SessionGone


class Actor:
    def __init__(
        self,
        kube: Kube,
        cache: Cache,
        fence: Callable[[], None],
        event: EventPoster,
        hibernator: Hibernator | None = None,
        records: Records | None = None,
    ) -> None:
        self.kube = kube
        self.hibernator = hibernator or Hibernator(kube, None, event)
        self.cache = cache
        self.fence = fence
        self.event = event
        # A claim create met by an existing claim: record.create_refused (kube/session_records.py).
        self.records = records if records is not None else Records()

    async def act(
        self,
        action: Action,
        session: Mapping[str, Any],
        claim: Mapping[str, Any] | None,
        log: Any,
        deadline_lag: float | None,
    ) -> bool:
        """Do one action; True when the session needs another pass soon."""
        namespace = session["metadata"]["namespace"]
        self.fence()
        if isinstance(action, CreateClaim):
            return await self._create_claim(action, session, log)
        if isinstance(action, PatchClaim):
            await self.kube.patch_claim(namespace, action.name, action.patch)
            log.info("claim patched", claim=action.name, patch=action.patch)
            shutdown = ((action.patch.get("spec") or {}).get("lifecycle") or {}).get("shutdownTime")
            if shutdown:
                self.event(
                    session, "ExpiryChanged", f"The session now expires at {shutdown} (ttl or policy changed)", "Normal"
                )
        elif isinstance(action, DeleteClaim):
            uid = (claim or {}).get("metadata", {}).get("uid")
            if await self.kube.delete_claim(namespace, action.name, uid):
                metrics.CLAIMS_DELETED.labels(reason=action.reason).inc()
                if deadline_lag is not None:
                    metrics.REAP_LAG.observe(max(deadline_lag, 0.0))
                log.info("claim deleted", claim=action.name, reason=action.reason)
                self.event(session, action.reason, f"Deleted SandboxClaim {action.name} ({action.reason})", "Normal")
        elif isinstance(action, ApplyNetworkPolicy):
            await self.apply_network_policy(action, session, log)
        elif isinstance(action, HibernateSandbox):
            await self.hibernator.hibernate(action, session, log)
            await self._patch_sandbox(PatchSandbox(action.name, action.suspend), session, log, deadline_lag)
        elif isinstance(action, FinishRestore):
            await self.hibernator.finish_restore(action, session, log)
        elif isinstance(action, ForgetCheckpoint):
            self.hibernator.forget_soon(session, still_there=True)
        elif isinstance(action, PatchSandbox):
            await self._patch_sandbox(action, session, log, deadline_lag)
        return False

    async def _patch_sandbox(
        self, action: PatchSandbox, session: Mapping[str, Any], log: Any, deadline_lag: float | None
    ) -> None:
        namespace = session["metadata"]["namespace"]
        written = await self.kube.patch_sandbox(namespace, action.name, action.patch)
        if written is not None:
            # Cached as written: the next pass may come before the watch shows it (a hibernate's own status
            # write brings one at once), and one that saw the Sandbox still Running would act again on a pod
            # being stopped (checkpoint it, the fallback's reason overwritten by the agent's refusal).
            self.cache.remember_sandbox((namespace, action.name), written)
        if "operatingMode" not in (action.patch.get("spec") or {}):
            log.info("sandbox patched", sandbox=action.name, patch=action.patch)
            return
        mode = (action.patch.get("spec") or {}).get("operatingMode", "")
        log.info("sandbox operating mode set", sandbox=action.name, mode=mode)
        if deadline_lag is not None and mode == c.OPERATING_MODE_SUSPENDED:
            metrics.REAP_LAG.observe(max(deadline_lag, 0.0))
        reason = "Suspended" if mode == c.OPERATING_MODE_SUSPENDED else "Resumed"
        self.event(session, reason, f"Sandbox {action.name} operatingMode set to {mode}", "Normal")

    async def _create_claim(self, action: CreateClaim, session: Mapping[str, Any], log: Any) -> bool:
        namespace, name = session["metadata"]["namespace"], session["metadata"]["name"]
        if self.cache.is_deleted(session):
            # Its DELETED event was handled while this pass awaited the API (a pass started by a claim,
            # a deadline or a take-over, not by the session's own event): no claim for a dead session.
            raise SessionGone()
        created = await self.kube.create_claim(action.manifest)
        claim_name = action.manifest["metadata"]["name"]
        if created is None:
            self.records.of((namespace, name)).create_refused = True
            existing = await self.kube.get_claim(namespace, claim_name)
            if existing is None:
                log.warning("the claim create met a 409 but no claim is there: creating again", claim=claim_name)
            elif is_owned_by(existing, session["metadata"]["uid"]):
                self.cache.remember_claim((namespace, claim_name), existing)
                log.info("claim exists already", claim=claim_name)
            else:
                log.warning("a SandboxClaim of that name belongs to someone else", claim=claim_name)
            # Either way the next pass sees the claim (or its absence) and decides with it. Not scheduled
            # here: a ScheduleCheck later in this pass would replace it with a far deadline.
            return True
        self.cache.remember_claim((namespace, claim_name), created)
        metrics.CLAIMS_CREATED.inc()
        log.info("claim created", claim=claim_name)
        # No ClaimCreated Event: status.claimName and the ClaimCreated condition say it, and an Event is one
        # more POST to the API server per new session.
        source = fork.source_name(session)
        if source:
            copies = [
                f"{v['metadata']['name']} (from PVC {v['spec']['dataSource']['name']})"
                for v in action.manifest["spec"].get("volumeClaimTemplates") or []
                if (v.get("spec") or {}).get("dataSource")
            ]
            message = f"Fork of AgentSession {source}: volumes cloned: {', '.join(copies)}"
            self.event(session, "Forked", message, "Normal")
        return False

    async def apply_network_policy(self, action: ApplyNetworkPolicy, session: Mapping[str, Any], log: Any) -> None:
        manifest = action.manifest
        namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        current = dict(action.current) if action.current is not None else None
        if current is None:
            written = await self.kube.create_network_policy(manifest)
            if written is None:  # the watch has not shown it yet: read it, and replace it only if ours
                current = await self.kube.get_network_policy(namespace, name)
        if current is not None:
            if not is_owned_by(current, session["metadata"]["uid"]):
                # Never overwritten. Cached (the watch sees only ours) so the retried pass reports NameConflict;
                # failing this one keeps it from writing NetworkIsolated=True.
                self.cache.remember_network_policy((namespace, name), current)
                raise RuntimeError(f"NetworkPolicy {namespace}/{name} exists and is not this session's")
            written = await self.kube.replace_network_policy(current, manifest)
        if written is not None:
            self.cache.remember_network_policy((namespace, name), written)
        log.info("network policy applied", network_policy=name, created=action.current is None)
