"""AgentSessionPolicy status (valid, matchedSessions, observedGeneration), written when it changes and,
after session changes, once a burst is over."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from agentsession_operator.decisions import policy
from agentsession_operator.decisions.actions import patch_changes
from agentsession_operator.infra.logs import logger
from agentsession_operator.kube import clock
from agentsession_operator.kube.background import Background
from agentsession_operator.kube.cache import Cache
from agentsession_operator.kube.client import Kube

DEBOUNCE = 2.0  # seconds: matchedSessions follows session changes this late, once per burst


class PolicyStatus:
    def __init__(self, kube: Kube, cache: Cache, background: Background, leads: Callable[[str], bool]) -> None:
        self.kube = kube
        self.cache = cache
        self.background = background
        self.leads = leads  # whether this replica acts on a namespace (the leader; sharded, its shard's holder)
        self.due: set[str] = set()  # namespaces whose policies' status is refreshed soon

    def soon(self, namespace: str) -> None:
        """Refresh the namespace's policies' status once a burst of session changes is over: one pass
        over the namespace per DEBOUNCE, not one per session event."""
        if namespace in self.due:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): the next policy event writes it
            return
        self.due.add(namespace)
        self.background.spawn(self._later(namespace), loop)

    async def _later(self, namespace: str) -> None:
        await asyncio.sleep(DEBOUNCE)
        self.due.discard(namespace)
        if not self.leads(namespace):
            return
        for name in list(self.cache.policies.get(namespace, {})):
            try:
                await self.update(namespace, name)
            except Exception as exc:  # the next change or policy event writes it
                logger(namespace=namespace, policy=name).warning("policy status not written", error=str(exc)[:300])

    async def update(self, namespace: str, name: str) -> None:
        """One policy's status, written when it changes."""
        body = self.cache.policies.get(namespace, {}).get(name)
        if body is None:
            return
        status = policy.policy_status(body, self.cache.bodies_in(namespace), clock.now())
        if patch_changes(body.get("status") or {}, status):
            await self.kube.patch_policy_status(namespace, name, status)
