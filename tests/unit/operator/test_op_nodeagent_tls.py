"""Issue 49 item 5, TLS: the operator's token goes only to an agent that proves, by a certificate the operator's
own CA signed for that agent's node, that it is that node's agent.

The operator posted each node's bearer token over plain HTTP to whatever answered at the agent pod's IP: a
listener on the pod network (a pod that took the address after the agent's, a node's traffic seen on the way)
took the token, good against that node's agent for 10 minutes, and every tenant pod name the operator sent.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from agentsession_operator.kube import node_agent
from agentsession_operator.kube.node_agent import AgentSelector, NodeAgents, NodeTokens


class Minter:
    async def request_token(self, namespace: str, account: str, audience: str, seconds: int) -> str:
        return f"token-for-{audience}"


class Lister:
    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return [
            {
                "spec": {"nodeName": "node-a"},
                "status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]},
            }
        ]


class Impostor:
    """A plain HTTP listener at the agent's address, answering as an agent would, keeping what it is sent."""

    def __init__(self) -> None:
        self.heard: list[dict[str, str]] = []
        heard = self.heard

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                heard.append({"authorization": self.headers.get("Authorization") or "", "path": self.path})
                data = json.dumps({"sizeBytes": 1, "deleted": True, "images": []}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]


@pytest.fixture
def impostor(monkeypatch: pytest.MonkeyPatch) -> Iterator[Impostor]:
    listener = Impostor()
    monkeypatch.setattr(node_agent, "AGENT_PORT", listener.port)
    thread = threading.Thread(target=listener.httpd.serve_forever, daemon=True)
    thread.start()
    yield listener
    listener.httpd.shutdown()
    listener.httpd.server_close()
    thread.join(timeout=5)


def operator_agents() -> NodeAgents:
    """As the reconciler builds them with --node-agent and --node-agent-account (config/ sets both)."""
    tokens = NodeTokens(Minter(), "agentsession-system/agentsession-operator")
    return NodeAgents(Lister(), AgentSelector("agentsession-nodeagent", "app=agent"), tokens, timeout=10)


async def test_a_listener_at_the_agents_address_gets_no_token(impostor: Impostor) -> None:
    """Before: the impostor got 'Bearer token-for-agentsession-nodeagent:node-a' with every request, and its
    answers were believed (a checkpoint 'taken', an image 'deleted')."""
    agents = operator_agents()
    taken = await agents.checkpoint("team-a", "pod-1", "s-1", "pod-1", node="node-a")
    outcome = await agents.delete_outcome("team-a", "s-1")
    assert [h["authorization"] for h in impostor.heard if h["authorization"]] == []
    assert not taken.ok
    assert not outcome.deleted
