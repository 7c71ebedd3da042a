"""Hibernate's I/O (issue 33): the node agent's checkpoint, its record on the status, its Events.

What to do is decided in decisions/hibernate.py; this runs it. A checkpoint that fails for any
reason leaves the session to suspend as Suspend: the caller suspends the Sandbox after this returns,
whatever it recorded, so the workspace volume is always kept.

A checkpoint is waited for outside the pass's slot (kube/fairness.py: FairSlots.aside), in turns of its own:
at most CHECKPOINTS_PER_NAMESPACE of a namespace at the agents, and one per node (the agent takes one at a
time and answers busy to a second): a tenant's hundred hibernations hold neither every pass slot nor a
node's queue ahead of another tenant's (issue 49 item 4).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

from agentsession_api import phases
from agentsession_api.timestamps import parse_time, utc
from agentsession_operator.decisions import hibernate
from agentsession_operator.decisions.actions import FinishRestore, HibernateSandbox
from agentsession_operator.infra import metrics
from agentsession_operator.infra.logs import logger
from agentsession_operator.kube import clock
from agentsession_operator.kube.fairness import Turns
from agentsession_operator.kube.node_agent import NodeAgents

EventPoster = Callable[[Mapping[str, Any], str, str, str], None]
"""status_writer's Event poster (object, reason, message, type), passed in (a room below it)."""
Spawner = Callable[[Coroutine[Any, Any, None]], Any]
"""Runs a coroutine in the background (kube/background.py), the deleted sessions' image deletes."""
Aside = Callable[[str], AbstractAsyncContextManager[None]]
"""The reconciler's FairSlots.aside: a pass's slot given up while its checkpoint is waited for."""

CHECKPOINTS_PER_NAMESPACE = 2
"""A namespace's checkpoints asked of the agents at once (each waits for its node's turn there): enough to
keep two nodes busy, few enough that another namespace's hibernation waits behind two, not a hundred."""


def _in_place(namespace: str) -> AbstractAsyncContextManager[None]:
    return contextlib.nullcontext()


class Hibernator:
    def __init__(
        self,
        kube: Any,
        agents: NodeAgents | None,
        event: EventPoster,
        max_bytes: int = hibernate.DEFAULT_MAX_CHECKPOINT_BYTES,
        spawn: Spawner | None = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        used_bytes: Callable[[str, str], int] | None = None,
        aside: Aside = _in_place,
    ) -> None:
        self.kube = kube
        self.agents = agents
        self.event = event
        self.max_bytes = max_bytes
        self.spawn = spawn
        self.sleep = sleep
        self.used_bytes = used_bytes
        """(namespace, a session's UID): the checkpoint bytes the namespace's other hibernated sessions keep."""
        self.aside = aside
        self.per_namespace = Turns(CHECKPOINTS_PER_NAMESPACE)
        self.per_node = Turns(1)  # the agent takes one checkpoint at a time: never ask it for a second
        self.forgetting: set[str] = set()
        """UIDs of sessions whose image delete is under way or done (one per session and process)."""

    async def _record(self, session: Mapping[str, Any], record: dict[str, Any]) -> None:
        meta = session["metadata"]
        await self.kube.patch_session_status(
            meta["namespace"],
            meta["name"],
            {"hibernation": record},
            uid=meta.get("uid"),
            has_status=bool(session.get("status")),
        )

    async def hibernate(self, action: HibernateSandbox, session: Mapping[str, Any], log: Any) -> None:
        """Checkpoint (when a node agent is configured) and record; the caller then suspends."""
        if self.agents is None:
            return  # condition Hibernated False, HibernateUnavailable (decisions/status.py)
        namespace = session["metadata"]["namespace"]
        now = utc(clock.now())
        verdict = hibernate.before_checkpoint(await self.agents.reachable())
        budget, by = action.hibernated_budget, action.budget_policy
        used = 0
        if budget is not None and self.used_bytes is not None:
            used = self.used_bytes(namespace, str(session["metadata"].get("uid") or ""))
        if verdict.hibernate:
            verdict = hibernate.within_budget(used, 0, budget, by) or verdict
        size: int | None = None
        if verdict.hibernate:
            # The wake's pod is named after the Sandbox (agent-sandbox), not after a warm pool's pod.
            bound = hibernate.max_bytes_for(self.max_bytes, action.max_bytes)
            # The bound goes with the request: the agent refuses a sandbox holding more memory before writing.
            async with self.aside(namespace), self.per_namespace.turn(namespace), self.per_node.turn(action.node):
                result = await self.agents.checkpoint(
                    namespace, action.pod, action.checkpoint, action.name, bound, node=action.node
                )
            verdict = hibernate.after_checkpoint(result, bound)
            size = result.size_bytes
            if verdict.hibernate:
                verdict = hibernate.within_budget(used, result.size_bytes, budget, by) or verdict
            if not verdict.hibernate and result.ok:
                await self.agents.delete(namespace, action.checkpoint)  # too large, or over budget: not kept
        taken = parse_time(action.taken_at) if action.taken_at else None
        record = hibernate.record(verdict, action.checkpoint, size, taken or now, action.pod_spec_digest)
        await self._record(session, record)
        log.info("hibernate", reason=verdict.reason, checkpoint=action.checkpoint, size_bytes=size)
        if verdict.hibernate:
            self.event(session, "Hibernated", verdict.message, "Normal")
        else:
            self.event(session, "HibernateFallback", verdict.message, "Warning")

    async def finish_restore(self, action: FinishRestore, session: Mapping[str, Any], log: Any) -> None:
        """The woken pod is Ready: the image deleted; Restored, or RestoreFailed when the shim started the
        pod fresh (the node agent answers its record with the delete)."""
        namespace = session["metadata"]["namespace"]
        failure = None
        if self.agents is not None:
            failure = (await self.agents.delete_outcome(namespace, action.checkpoint)).restore_failed
        record = action.record if failure is None else hibernate.restore_failed_record(action.checkpoint, failure)
        await self._record(session, record)
        if failure is None and record.get("reason") == phases.REASON_POD_SPEC_CHANGED:
            log.warning("pod spec changed while hibernated, woke fresh", checkpoint=action.checkpoint)
            self.event(session, phases.REASON_POD_SPEC_CHANGED, record["message"], "Warning")
        elif failure is None:
            log.info("woke from checkpoint", checkpoint=action.checkpoint)
            self.event(session, "Woke", record.get("message", ""), "Normal")
        else:
            log.warning("restore failed, started fresh", checkpoint=action.checkpoint, error=failure[:300])
            self.event(session, "RestoreFailed", record["message"], "Warning")

    def forget_soon(self, session: Mapping[str, Any], still_there: bool = False) -> bool:
        """The image of a session deleted (or, ``still_there``, expired or being deleted), deleted in the
        background, once per session: True when a delete was started now."""
        checkpoint = hibernate.checkpoint_to_forget(session)
        uid = str((session.get("metadata") or {}).get("uid") or "")
        if checkpoint is None or self.agents is None or not uid or uid in self.forgetting:
            return False
        self.forgetting.add(uid)
        work = self._forget(session, checkpoint, still_there)
        if self.spawn is None:
            work.close()
            return False
        self.spawn(work)
        return True

    async def _forget(self, session: Mapping[str, Any], checkpoint: str, still_there: bool) -> None:
        await self.forget_checkpoint(session, checkpoint, still_there)

    async def forget_checkpoint(self, session: Mapping[str, Any], checkpoint: str, still_there: bool) -> bool:
        """Delete the image, tried a bounded number of times (decisions/hibernate.py: FORGET_DELAYS); a
        Warning Event CheckpointNotDeleted when an agent never answered. True when nothing is left."""
        assert self.agents is not None
        namespace = str(session["metadata"]["namespace"])
        log = logger(namespace=namespace, session=session["metadata"].get("name"))
        attempt = 0
        while True:
            outcome = await self.agents.delete_outcome(namespace, checkpoint)
            wait = hibernate.forget_step(outcome, attempt)
            if wait is None:
                break
            attempt += 1
            await self.sleep(wait)
        if hibernate.gave_up(outcome):
            message = hibernate.not_deleted_message(namespace, checkpoint, outcome, attempt + 1)
            log.warning("checkpoint not deleted", checkpoint=checkpoint, tries=attempt + 1)
            self.event(session, hibernate.EVENT_CHECKPOINT_NOT_DELETED, message, "Warning")
            return False
        if not still_there:
            # Gone for good: its UID never comes back. An expired one's stays (its DELETED event may follow).
            self.forgetting.discard(str(session["metadata"].get("uid") or ""))
        log.info("checkpoint of a deleted session deleted", checkpoint=checkpoint, found=outcome.deleted)
        if still_there:
            try:  # gone meanwhile: the patch finds no session (None), nothing to say
                await self._record(session, hibernate.forgotten_record(checkpoint))
            except Exception as exc:  # the image is gone; a later pass sees the status as it is
                log.warning("status.hibernation not updated after the delete", error=str(exc)[:300])
        return True

    async def sweep(self, leads: Callable[[str], bool]) -> list[tuple[str, str]]:
        """Delete the images no live session owns, in the namespaces this replica leads (``leads``): those of
        sessions deleted while the operator was down, or whose deletes the agents never answered. Judged on
        a live listing of each namespace's sessions (decisions/hibernate.py: images_to_sweep); the deleted."""
        if self.agents is None:
            return []
        listed = await self.agents.images()
        live: dict[str, list[dict[str, Any]]] = {}
        for namespace in sorted({ns for ns, _ in listed if leads(ns)}):
            try:
                live[namespace] = await self.kube.list_sessions(namespace)
            except Exception as exc:  # not judged: the next sweep tries again
                logger(namespace=namespace).warning("checkpoint sweep: sessions not listed", error=str(exc)[:300])
        swept = []
        for namespace, name in hibernate.images_to_sweep(listed, live):
            if not leads(namespace):  # lost the lead meanwhile: the new leader sweeps
                continue
            if await self.agents.delete(namespace, name):
                swept.append((namespace, name))
                metrics.CHECKPOINTS_SWEPT.inc()
                logger(namespace=namespace).info("checkpoint of a gone session deleted", checkpoint=name)
        return swept
