"""Issue 49 items 4 and 5: a checkpoint request goes to the agent on the sandbox's node, and to no other.

The operator asked every Ready agent in turn, each with its bearer token, until one had the pod: every
agent of the cluster saw the operator's token and the tenant's pod name on every hibernation, and one
unreachable agent (a node gone) added its whole timeout (180 s) to every hibernation on every other node.
The Sandbox's status names the node (agent-sandbox copies the pod's spec.nodeName); the agents are pods,
each with its own spec.nodeName.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agentsession_nodeagent import authz
from agentsession_operator.decisions.actions import HibernateSandbox, reconcile_actions
from agentsession_operator.kube.hibernation import Hibernator
from agentsession_operator.kube.node_agent import Agent, AgentSelector, NodeAgents, NodeTokens
from tests.unit.operator.test_op_actions import ready_claim, settle

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
Make = Callable[..., dict[str, Any]]
LOG = type("Log", (), {"info": lambda *a, **k: None, "warning": lambda *a, **k: None})()


def agent_pod(ip: str, node: str) -> dict[str, Any]:
    return {
        "spec": {"nodeName": node},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
    }


class Lister:
    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return [agent_pod("10.0.1.1", "node-a"), agent_pod("10.0.2.1", "node-b")]


class RecordingAgents(NodeAgents):
    """The real NodeAgents, its HTTP replaced: node-a's agent never answers (its node is gone)."""

    def __init__(self, token: Path) -> None:
        super().__init__(Lister(), AgentSelector("agentsession-nodeagent", "app=agent"), token)
        self.calls: list[tuple[str, str]] = []

    async def _post(self, agent: Agent, path: str, body: dict[str, Any], token: str) -> tuple[int, dict[str, Any]]:
        ip = agent.ip
        self.calls.append((ip, path))
        if ip == "10.0.1.1":
            raise TimeoutError("node-a's agent does not answer")
        if path == "/v1/checkpoint":
            return 200, {"sizeBytes": 1000}
        return 200, {"deleted": True}


class Kube:
    async def patch_session_status(self, *args: Any, **kwargs: Any) -> None:
        pass


async def test_a_checkpoint_asks_only_the_agent_on_the_sandboxs_node(
    make_session: Make, make_claim: Make, make_sandbox: Make, tmp_path: Path
) -> None:
    spec = {"warmPoolRef": {"name": "p"}, "idleTimeout": "15m", "idleAction": "Hibernate"}
    sandbox = make_sandbox()
    sandbox["status"]["nodeName"] = "node-b"  # agent-sandbox copies the pod's spec.nodeName
    session = settle(
        make_session(spec=spec), reconcile_actions(make_session(spec=spec), ready_claim(make_claim), sandbox, T0)
    )
    idle = reconcile_actions(session, ready_claim(make_claim), sandbox, T0 + timedelta(minutes=20))
    (action,) = [a for a in idle if isinstance(a, HibernateSandbox)]
    token = tmp_path / "token"
    token.write_text("operator-token")
    agents = RecordingAgents(token)
    await Hibernator(Kube(), agents, lambda *a: None).hibernate(action, session, LOG)
    assert agents.calls == [("10.0.2.1", "/v1/checkpoint")]


async def test_without_a_node_every_agent_is_asked_and_a_nodes_missing_agent_fails_at_once(tmp_path: Path) -> None:
    """A Sandbox that names no node (an older agent-sandbox): every agent in turn, as before. A node whose
    agent is not Ready: the checkpoint fails at once, saying which node (the session suspends as Suspend)."""
    token = tmp_path / "token"
    token.write_text("operator-token")
    agents = RecordingAgents(token)
    result = await agents.checkpoint("team-a", "pod-1", "img", "sbx")
    assert result.ok and agents.calls == [("10.0.1.1", "/v1/checkpoint"), ("10.0.2.1", "/v1/checkpoint")]
    agents.calls.clear()
    result = await agents.checkpoint("team-a", "pod-1", "img", "sbx", node="node-c")
    assert not result.ok and "no Ready node agent on node node-c" in result.error and agents.calls == []


class FakeHttp:
    """aiohttp.ClientSession as NodeAgents uses it, recording each request's URL and Authorization header."""

    sent: list[tuple[str, str]] = []

    def __init__(self, **kwargs: Any) -> None:
        pass

    async def __aenter__(self) -> FakeHttp:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    def post(self, url: str, json: Any = None, headers: dict[str, str] | None = None, **tls: Any) -> Any:
        FakeHttp.sent.append((url, (headers or {}).get("Authorization", "")))

        class Answer:
            status = 200

            async def __aenter__(self) -> Answer:
                return self

            async def __aexit__(self, *exc: object) -> None:
                pass

            async def json(self, content_type: Any = None) -> dict[str, Any]:
                return {"deleted": False, "images": []}

        return Answer()


class Minter:
    """The TokenRequest API: a token names the account and audience it was minted for."""

    def __init__(self) -> None:
        self.minted: list[str] = []

    async def request_token(self, namespace: str, account: str, audience: str, seconds: int) -> str:
        self.minted.append(audience)
        return f"{namespace}/{account}@{audience}"


def operator_agents(tmp_path: Path, minter: Minter | None = None) -> NodeAgents:
    """The operator's NodeAgents as the reconciler builds it with --node-agent-account (config/ sets it)."""
    tokens = NodeTokens(minter or Minter(), "agentsession-system/agentsession-operator")
    return NodeAgents(Lister(), AgentSelector("agentsession-nodeagent", "app=agent"), tokens, trust=AnyTrust())


class AnyTrust:
    async def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context()


async def test_what_one_nodes_agent_receives_is_no_key_to_another_nodes_agent(tmp_path: Path, monkeypatch: Any) -> None:
    """Issue 49 item 5: a node's agent (a compromised node) sees the token the operator sends it; that token
    must be useless against every other node's agent. The operator sent one token, bound to one audience
    that every agent accepts, to all of them."""
    from agentsession_operator.kube import node_agent

    monkeypatch.setattr(node_agent.aiohttp, "ClientSession", FakeHttp)
    FakeHttp.sent = []
    agents = operator_agents(tmp_path)
    await agents.delete_outcome("team-a", "img")  # a delete goes to every agent
    sent = dict(FakeHttp.sent)
    to_a, to_b = sent["https://10.0.1.1:8490/v1/delete"], sent["https://10.0.2.1:8490/v1/delete"]
    assert to_a != to_b, "node-a's agent received the very token node-b's agent accepts"
    # Each bound to its own node's agent's audience, which is all that agent accepts (nodeagent.__main__).
    assert to_a == f"Bearer agentsession-system/agentsession-operator@{authz.audience_for('node-a')}"
    assert to_b == f"Bearer agentsession-system/agentsession-operator@{authz.audience_for('node-b')}"
    assert authz.audience_for("node-a") == "agentsession-nodeagent:node-a"


async def test_a_nodes_token_is_minted_once_per_two_thirds_of_its_life() -> None:
    minter, now = Minter(), [0.0]
    tokens = NodeTokens(minter, "ns/op", seconds=600, clock=lambda: now[0])
    assert await tokens.token("node-a") == await tokens.token("node-a")
    await tokens.token("node-b")
    now[0] = 401.0  # past 2/3 of 600 s
    await tokens.token("node-a")
    assert minter.minted == [authz.audience_for(n) for n in ("node-a", "node-b", "node-a")]


async def test_a_failed_token_request_skips_that_agent_only(tmp_path: Path, monkeypatch: Any) -> None:
    """The TokenRequest refused (RBAC missing, the API server away): that node's agent is not asked."""
    from agentsession_operator.kube import node_agent

    class Refusing(Minter):
        async def request_token(self, namespace: str, account: str, audience: str, seconds: int) -> str:
            if audience.endswith("node-a"):
                raise PermissionError("serviceaccounts/token is forbidden")
            return await super().request_token(namespace, account, audience, seconds)

    monkeypatch.setattr(node_agent.aiohttp, "ClientSession", FakeHttp)
    FakeHttp.sent = []
    outcome = await operator_agents(tmp_path, Refusing()).delete_outcome("team-a", "img")
    assert [url for url, _ in FakeHttp.sent] == ["https://10.0.2.1:8490/v1/delete"]
    assert outcome.unreachable == 1 and outcome.asked == 2
