"""The operator's side of the node agent (issue 33): ask for one pod's checkpoint, delete one image, list
the images of every node (the sweep of images whose session is gone).

The agents are the Ready pods of ``--node-agent=<namespace>/<selector>`` (a DaemonSet). A checkpoint goes
to the agent on the sandbox's node only (the Sandbox's status.nodeName, matched with each agent pod's
spec.nodeName): no other agent sees the operator's token or the tenant's pod name, and a gone node's agent
delays no other node's hibernation (issue 49 items 4 and 5). Only when the Sandbox names no node is every
agent asked in turn (the one on the pod's node answers, the others 404). Every request carries the
operator's projected token, bound to the agents' audience (the agent TokenReviews it and admits only the
operator).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from agentsession_api.node_agent import audience_for, server_name
from agentsession_operator.decisions.hibernate import CheckpointResult, DeleteOutcome
from agentsession_operator.infra.logs import logger

AGENT_PORT = 8490
TOKEN_PATH = Path("/var/run/secrets/agentsession-nodeagent/token")


class NoToken(RuntimeError):
    """The operator could not mint the token for an agent's node (the TokenRequest failed)."""


class NoTrust(RuntimeError):
    """The operator has no CA to verify the agents with: it sends them nothing."""


UNREACHABLE = (aiohttp.ClientError, TimeoutError, OSError, ValueError, NoToken, NoTrust)
"""What a request to an agent raises when it got no answer (refused, timed out, not JSON, no token, not the
node's agent by its certificate: aiohttp's certificate errors are ClientErrors)."""


CONNECT_TIMEOUT = 5.0
"""Seconds to reach an agent: a gone node's agent (its SYNs unanswered) costs this, not the checkpoint's bound."""
BUSY_RETRY = 2.0
"""Seconds before an agent that answered busy (another checkpoint on its node, or its connection cap) is asked
again, within the request's bound."""


TOKEN_SECONDS = 600
"""A node's token lives 10 minutes (the API server's floor); a new one is minted after two thirds of it."""


class PodLister(Protocol):
    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]: ...


class TokenMinter(Protocol):
    async def request_token(self, namespace: str, account: str, audience: str, seconds: int) -> str: ...


class TokenSource(Protocol):
    async def token(self, node: str) -> str: ...


class Trust(Protocol):
    async def client_context(self) -> ssl.SSLContext: ...


@dataclass(frozen=True)
class FileToken:
    """One token for every agent, read from a file at each request (the kubelet rotates a projected one):
    an operator without an account to mint per-node tokens for (``--node-agent-token``)."""

    path: Path

    async def token(self, node: str) -> str:
        return self.path.read_text().strip()


class NodeTokens:
    """A token per node, minted for the operator's own ServiceAccount and bound to that node's agent's
    audience; kept until two thirds of its life, then minted again."""

    def __init__(
        self,
        minter: TokenMinter,
        account: str,
        seconds: int = TOKEN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.minter = minter
        self.namespace, _, self.account = account.partition("/")
        if not self.namespace or not self.account:
            raise ValueError(f"--node-agent-account wants <namespace>/<ServiceAccount>, got {account!r}")
        self.seconds = seconds
        self.clock = clock
        self.minted: dict[str, tuple[str, float]] = {}
        """node -> (token, when to mint the next)."""

    async def token(self, node: str) -> str:
        kept = self.minted.get(node)
        if kept is not None and self.clock() < kept[1]:
            return kept[0]
        token = await self.minter.request_token(self.namespace, self.account, audience_for(node), self.seconds)
        self.minted[node] = (token, self.clock() + self.seconds * 2 / 3)
        return token


@dataclass(frozen=True)
class AgentSelector:
    namespace: str
    selector: str

    @classmethod
    def parse(cls, value: str) -> AgentSelector:
        namespace, _, selector = value.partition("/")
        if not namespace or not selector:
            raise ValueError(f"--node-agent wants <namespace>/<label selector>, got {value!r}")
        return cls(namespace, selector)


@dataclass(frozen=True)
class Agent:
    ip: str
    node: str
    """The agent pod's spec.nodeName ("" before it is scheduled, which a Ready pod always is)."""


def ready_agents(pods: list[dict[str, Any]]) -> list[Agent]:
    """The agents that are Ready: their pod IP and node."""
    agents = []
    for pod in pods:
        status = pod.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        if ready and status.get("podIP"):
            agents.append(Agent(status["podIP"], str((pod.get("spec") or {}).get("nodeName") or "")))
    return agents


def agents_for(agents: list[Agent], node: str) -> list[Agent]:
    """Whom to ask about a pod on ``node``: its node's agent alone when the node is known, else all."""
    return [a for a in agents if a.node == node] if node else agents


class NodeAgents:
    def __init__(
        self,
        lister: PodLister,
        where: AgentSelector,
        tokens: TokenSource | Path = TOKEN_PATH,
        timeout: float = 180.0,
        trust: Trust | None = None,
    ) -> None:
        self.lister = lister
        self.where = where
        self.tokens: TokenSource = FileToken(tokens) if isinstance(tokens, Path) else tokens
        self.timeout = timeout
        self.trust = trust
        """The node agents' CA; without it (no --node-agent-ca-secret) no agent is sent anything."""

    async def _ready(self) -> list[Agent]:
        return ready_agents(await self.lister.list_pods(self.where.namespace, self.where.selector))

    async def reachable(self) -> bool:
        return bool(await self._ready())

    async def _ask(self, agent: Agent, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """One request to one agent, with the token for its node alone."""
        try:
            token = await self.tokens.token(agent.node)
        except Exception as e:  # the API server's refusal or absence: this agent is not asked
            raise NoToken(f"no token for node {agent.node or '?'}: {type(e).__name__} {e}") from e
        return await self._post(agent, path, body, token)

    async def _post(self, agent: Agent, path: str, body: dict[str, Any], token: str) -> tuple[int, dict[str, Any]]:
        """POST over TLS to ``agent``'s pod IP, its certificate checked for its node's name: the handshake
        fails, and the token is never written, unless the other end holds that node's agent's key."""
        if self.trust is None:
            raise NoTrust("no CA to verify the node agents with (--node-agent-ca-secret): nothing is sent to them")
        try:
            context = await self.trust.client_context()
        except Exception as e:  # the CA's Secret missing or unreadable: nothing is sent
            raise NoTrust(f"no CA to verify the node agents with: {type(e).__name__} {e}") from e
        timeout = aiohttp.ClientTimeout(total=self.timeout, sock_connect=CONNECT_TIMEOUT)
        async with (
            aiohttp.ClientSession(timeout=timeout) as http,
            http.post(
                f"https://{agent.ip}:{AGENT_PORT}{path}",
                json=body,
                headers={"Authorization": f"Bearer {token}"},
                ssl=context,
                server_hostname=server_name(agent.node),
            ) as answer,
        ):
            data = await answer.json(content_type=None)
            return answer.status, data if isinstance(data, dict) else {}

    async def checkpoint(
        self,
        namespace: str,
        pod: str,
        name: str,
        restore_into: str,
        max_bytes: int | None = None,
        node: str = "",
    ) -> CheckpointResult:
        """The checkpoint of ``namespace/pod`` into image ``name``, from the agent on its node (``node``, when
        known, is the only one asked); only pod ``restore_into`` (the one the wake creates) restores from it.
        ``max_bytes``, the session's bound, goes with it: the agent measures the sandbox's memory first and
        refuses one over it without writing (an agent older than that ignores the field; the image is then
        judged after, as before)."""
        errors = []
        request: dict[str, Any] = {"namespace": namespace, "pod": pod, "name": name, "restoreInto": restore_into}
        if max_bytes is not None:
            request["maxBytes"] = max_bytes
        asked = agents_for(await self._ready(), node)
        if node and not asked:
            return CheckpointResult(
                False, error=f"no Ready node agent on node {node}, where pod {namespace}/{pod} runs"
            )
        for agent in asked:
            ip = agent.ip
            try:
                status, body = await self._ask_until_free(agent, "/v1/checkpoint", request)
            except UNREACHABLE as e:
                errors.append(f"{ip}: {type(e).__name__} {e}")
                continue
            if status == 200:
                return CheckpointResult(True, size_bytes=int(body.get("sizeBytes", 0)))
            if status == 404:
                continue
            if status == 409:
                return CheckpointResult(False, error=str(body.get("error", "")), not_gvisor=True)
            measured = body.get("measuredBytes")
            if status == 413 and isinstance(measured, int) and not isinstance(measured, bool):
                return CheckpointResult(False, error=str(body.get("error", "")), measured_bytes=measured)
            return CheckpointResult(False, error=f"node agent {ip} answered {status}: {body.get('error', '')}")
        return CheckpointResult(False, error="; ".join(errors) or f"no node agent has pod {namespace}/{pod}")

    async def _ask_until_free(self, agent: Agent, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Ask, and while the agent answers busy (it takes one checkpoint at a time and answers a second at
        once), ask again every BUSY_RETRY seconds until the request's bound has passed."""
        give_up = time.monotonic() + self.timeout
        while True:
            status, answer = await self._ask(agent, path, body)
            if status != 503 or answer.get("busy") is not True or time.monotonic() + BUSY_RETRY > give_up:
                return status, answer
            await asyncio.sleep(BUSY_RETRY)

    async def images(self) -> list[tuple[str, str]]:
        """Every Ready agent's images, (namespace, name); an agent that does not answer adds none."""
        found: set[tuple[str, str]] = set()
        for agent in await self._ready():
            ip = agent.ip
            try:
                status, body = await self._ask(agent, "/v1/list", {})
            except UNREACHABLE as e:
                logger(agent=ip).warning("node agent unreachable for a listing", error=str(e))
                continue
            if status != 200:
                continue
            for item in body.get("images") or []:
                if (
                    isinstance(item, dict)
                    and isinstance(item.get("namespace"), str)
                    and isinstance(item.get("name"), str)
                ):
                    found.add((item["namespace"], item["name"]))
        return sorted(found)

    async def delete(self, namespace: str, name: str) -> bool:
        """Delete image ``name`` of ``namespace`` on every agent's node (it is on one); True if one had it."""
        return (await self.delete_outcome(namespace, name)).deleted

    async def delete_outcome(self, namespace: str, name: str) -> DeleteOutcome:
        """Delete image ``name`` of ``namespace`` on every Ready agent: whether one had it, how many answered,
        and the shim's record of a restore from it that failed, if a node had one."""
        deleted, failure = False, None
        agents = await self._ready()
        unreachable = 0
        for agent in agents:
            ip = agent.ip
            try:
                status, body = await self._ask(agent, "/v1/delete", {"namespace": namespace, "name": name})
            except UNREACHABLE as e:
                logger(agent=ip).warning("node agent unreachable for a delete", error=str(e))
                unreachable += 1
                continue
            if status != 200:
                unreachable += 1  # it did not say the image is gone
                continue
            deleted = deleted or bool(body.get("deleted"))
            record = body.get("restoreFailed")
            if isinstance(record, str) and failure is None:
                failure = record
        return DeleteOutcome(deleted, len(agents), unreachable, failure)
