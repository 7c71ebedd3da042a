"""Hibernate's I/O (issue 33): the node agent's checkpoint, its record on the status, its Events.

What to do is decided in decisions/hibernate.py; this runs it. A checkpoint that fails for any
reason leaves the session to suspend as Suspend: the caller suspends the Sandbox after this returns,
whatever it recorded, so the workspace volume is always kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agentsession_api.timestamps import utc
from agentsession_operator.decisions import hibernate
from agentsession_operator.decisions.actions import FinishRestore, HibernateSandbox
from agentsession_operator.kube import clock
from agentsession_operator.kube.node_agent import NodeAgents

EventPoster = Callable[[Mapping[str, Any], str, str, str], None]
"""status_writer's Event poster (object, reason, message, type), passed in (a room below it)."""


class Hibernator:
    def __init__(
        self,
        kube: Any,
        agents: NodeAgents | None,
        event: EventPoster,
        max_bytes: int = hibernate.DEFAULT_MAX_CHECKPOINT_BYTES,
    ) -> None:
        self.kube = kube
        self.agents = agents
        self.event = event
        self.max_bytes = max_bytes

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
        size: int | None = None
        if verdict.hibernate:
            result = await self.agents.checkpoint(namespace, action.pod, action.checkpoint)
            verdict = hibernate.after_checkpoint(result, self.max_bytes)
            size = result.size_bytes
            if not verdict.hibernate and result.ok:
                await self.agents.delete(namespace, action.checkpoint)  # too large: not kept
        await self._record(session, hibernate.record(verdict, action.checkpoint, size, now))
        log.info("hibernate", reason=verdict.reason, checkpoint=action.checkpoint, size_bytes=size)
        if verdict.hibernate:
            self.event(session, "Hibernated", verdict.message, "Normal")
        else:
            self.event(session, "HibernateFallback", verdict.message, "Warning")

    async def finish_restore(self, action: FinishRestore, session: Mapping[str, Any], log: Any) -> None:
        namespace = session["metadata"]["namespace"]
        if self.agents is not None:
            await self.agents.delete(namespace, action.checkpoint)
        await self._record(session, action.record)
        log.info("woke from checkpoint", checkpoint=action.checkpoint)
        self.event(session, "Woke", action.record.get("message", ""), "Normal")

    async def forget(self, namespace: str, session_name: str, session_uid: str) -> bool:
        """A deleted session's image, deleted (it holds the sandbox's memory)."""
        if self.agents is None:
            return False
        return await self.agents.delete(namespace, hibernate.checkpoint_name(session_name, session_uid))
