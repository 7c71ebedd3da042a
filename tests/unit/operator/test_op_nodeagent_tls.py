"""Issue 49 item 5, TLS: the operator's token goes only to an agent that proves, by a certificate the operator's
own CA signed for that agent's node, that it is that node's agent.

The operator posted each node's bearer token over plain HTTP to whatever answered at the agent pod's IP: a
listener on the pod network (a pod that took the address after the agent's, a node's traffic seen on the way)
took the token, good against that node's agent for 10 minutes, and every tenant pod name the operator sent.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from agentsession_api import node_agent as contract
from agentsession_nodeagent import checkpointer, server, tls
from agentsession_operator.decisions import agent_certificates
from agentsession_operator.kube import node_agent
from agentsession_operator.kube.agent_certificates import Authority, Signer
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


# ---- after the fix: the agents' certificates, signed by the operator's CA for their node -------------------

CA_SECRET = ("agentsession-system", "agentsession-nodeagent-ca")
AGENT_ACCOUNT = "system:serviceaccount:agentsession-nodeagent:agentsession-nodeagent"


class Secrets:
    """The shipped Secret, empty until the operator fills it (at its resourceVersion)."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.version = 1

    async def get_secret_data(self, namespace: str, name: str) -> tuple[dict[str, str], str] | None:
        return (dict(self.data), str(self.version)) if (namespace, name) == CA_SECRET else None

    async def fill_secret(self, namespace: str, name: str, data: dict[str, str], resource_version: str) -> bool:
        if resource_version != str(self.version):
            return False
        self.data, self.version = data, self.version + 1
        return True


def authority(secrets: Secrets | None = None) -> Authority:
    return Authority(secrets or Secrets(), *CA_SECRET)


def agent_pod(name: str, uid: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "agentsession-nodeagent", "uid": uid},
        "spec": {"nodeName": node, "serviceAccountName": "agentsession-nodeagent"},
        "status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]},
    }


AGENT_PODS = [agent_pod("agent-a", "uid-a", "node-a"), agent_pod("agent-b", "uid-b", "node-b")]


def csr(pod: str, uid: str, username: str = AGENT_ACCOUNT, request: bytes = b"", **extra: list[str]) -> dict[str, Any]:
    return {
        "metadata": {"name": f"csr-{pod}", "resourceVersion": "1"},
        "spec": {
            "signerName": contract.SIGNER,
            "username": username,
            "extra": {agent_certificates.POD_NAME: [pod], agent_certificates.POD_UID: [uid], **extra},
            "usages": ["digital signature", "server auth"],
            "request": base64.b64encode(request).decode(),
            "expirationSeconds": 3600,
        },
        "status": {},
    }


class CertificateAPI:
    """The API server's side of a CSR: approval, then the certificate, each at the version read."""

    def __init__(self) -> None:
        self.answers: list[tuple[bool, str, str]] = []
        self.issued: list[bytes] = []

    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return AGENT_PODS

    async def answer_certificate_request(
        self, request: dict[str, Any], approved: bool, reason: str, message: str
    ) -> dict[str, Any] | None:
        self.answers.append((approved, reason, message))
        kind = "Approved" if approved else "Denied"
        return {**request, "status": {"conditions": [{"type": kind, "status": "True"}]}}

    async def issue_certificate(self, request: dict[str, Any], certificate_pem: bytes) -> bool:
        self.issued.append(certificate_pem)
        return True


async def certificate_for(signer_authority: Authority, pod: str, uid: str, node: str) -> tls.Identity:
    """What the agent pod ``pod`` gets from the signer (its own key, the operator's certificate)."""
    key_pem, request_pem = tls.key_and_request(node)
    api = CertificateAPI()
    signer = Signer(api, signer_authority, "agentsession-nodeagent", "app=agent")
    assert await signer.answer(csr(pod, uid, request=request_pem)) == "signed", api.answers
    return tls.Identity.of(api.issued[0], key_pem)


@contextlib.contextmanager
def serving(identity: tls.Identity, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A real agent (server.py) on 127.0.0.1 serving ``identity``; yields the tokens it was asked with."""
    heard: list[str] = []

    def review(token: str, audience: str) -> dict[str, Any]:
        heard.append(token)
        user = "system:serviceaccount:agentsession-system:agentsession-operator"
        return {"status": {"authenticated": True, "user": {"username": user}, "audiences": [audience]}}

    root = tmp_path / "agent"
    node = checkpointer.Node(root / "runsc", root / "runsc-root", root / "state", root / "checkpoints")
    agent = server.Agent(node, review, "system:serviceaccount:agentsession-system:agentsession-operator", "aud")
    httpd = server.serve(agent, "127.0.0.1", 0, context=tls.server_context(identity))
    monkeypatch.setattr(node_agent, "AGENT_PORT", httpd.server_address[1])
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield heard
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def trusting_agents(trust: Authority) -> NodeAgents:
    tokens = NodeTokens(Minter(), "agentsession-system/agentsession-operator")
    return NodeAgents(Lister(), AgentSelector("agentsession-nodeagent", "app=agent"), tokens, timeout=10, trust=trust)


async def test_the_operator_talks_to_the_agent_its_ca_signed_for_that_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = authority()
    identity = await certificate_for(ca, "agent-a", "uid-a", "node-a")
    with serving(identity, tmp_path, monkeypatch) as heard:
        assert await trusting_agents(ca).images() == []
    assert heard == ["token-for-agentsession-nodeagent:node-a"]


async def test_another_nodes_agent_at_this_address_gets_no_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """node-b's genuine agent (a compromised node) answering at node-a's agent's address: its certificate
    names node-b, so the operator's handshake for node-a fails before node-a's token is written."""
    ca = authority()
    identity = await certificate_for(ca, "agent-b", "uid-b", "node-b")
    with serving(identity, tmp_path, monkeypatch) as heard:
        outcome = await trusting_agents(ca).delete_outcome("team-a", "s-1")
    assert (heard, outcome.deleted, outcome.unreachable) == ([], False, 1)


async def test_an_agent_signed_by_another_ca_gets_no_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A listener with a certificate for node-a's name from any CA but the operator's: refused."""
    identity = await certificate_for(authority(), "agent-a", "uid-a", "node-a")
    with serving(identity, tmp_path, monkeypatch) as heard:
        taken = await trusting_agents(authority()).checkpoint("team-a", "pod-1", "s-1", "pod-1", node="node-a")
    assert (heard, taken.ok) == ([], False)
    assert "CERTIFICATE_VERIFY_FAILED" in taken.error or "certificate" in taken.error.lower()


async def test_replicas_share_one_ca_made_once() -> None:
    secrets = Secrets()
    first, second = authority(secrets), authority(secrets)
    assert (await first.ca()).cert == (await second.ca()).cert
    assert secrets.version == 2  # filled once


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (csr("tenant-pod", "uid-t", username="system:serviceaccount:team-a:default"), "NotANodeAgent"),
        (csr("agent-a", "uid-b"), "NotANodeAgent"),  # a name and a UID of two different agents
        (csr("agent-a", "uid-a", username="system:serviceaccount:agentsession-nodeagent:other"), "NotANodeAgent"),
        (
            {**csr("agent-a", "uid-a"), "spec": {**csr("agent-a", "uid-a")["spec"], "extra": {}}},
            "NotAPod",
        ),  # an admin's or a user's request: no pod behind it
        (csr("agent-a", "uid-a", **{agent_certificates.NODE_NAME: ["node-b"]}), "NodeMismatch"),
        (
            {**csr("agent-a", "uid-a"), "spec": {**csr("agent-a", "uid-a")["spec"], "usages": ["client auth"]}},
            "BadUsages",
        ),
    ],
)
async def test_the_signer_denies_every_request_but_an_agent_pods_own(request_: dict[str, Any], reason: str) -> None:
    api = CertificateAPI()
    assert await Signer(api, authority(), "agentsession-nodeagent", "app=agent").answer(request_) == "denied"
    assert [(approved, why) for approved, why, _ in api.answers] == [(False, reason)]
    assert api.issued == []


async def test_the_certificate_names_the_pods_node_whatever_the_request_asks(tmp_path: Path) -> None:
    """agent-a asks with node-b's name in its subject: the certificate names node-a, the pod's node."""
    from cryptography import x509

    ca = authority()
    _, request_pem = tls.key_and_request("node-b")
    api = CertificateAPI()
    assert await Signer(api, ca, "ns", "app=agent").answer(csr("agent-a", "uid-a", request=request_pem)) == "signed"
    cert = x509.load_pem_x509_certificate(api.issued[0])
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["node-a.nodeagent.agentsession.dev"]
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds() <= 3600 + 300


def test_the_agent_waits_for_its_certificate_and_says_when_it_is_denied() -> None:
    class API:
        def __init__(self, status: dict[str, Any]) -> None:
            self.status = status

        def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
            if method == "POST":
                assert body is not None and body["spec"]["signerName"] == contract.SIGNER
                return {"metadata": {"name": "agentsession-nodeagent-x"}}
            return {"status": self.status}

    denied = API({"conditions": [{"type": "Denied", "message": "pod p is not a node agent's pod"}]})
    with pytest.raises(tls.NotSigned, match="Denied: pod p is not a node agent's pod"):
        tls.obtain(denied, "node-a", sleep=lambda s: None)
    clock = iter(range(0, 1000, 10))
    with pytest.raises(tls.NotSigned, match="--node-agent"):
        tls.obtain(API({}), "node-a", wait=30, clock=lambda: float(next(clock)), sleep=lambda s: None)


def test_a_handshake_dripped_a_byte_at_a_time_is_cut_at_the_request_deadline(tmp_path: Path) -> None:
    """The agent bounds a whole request to SOCKET_TIMEOUT from the connection's start (a per-read timeout alone
    restarts at every byte). The TLS handshake comes before the request: it is bounded too (CPython's ssl
    gives a handshake one deadline of the socket's timeout, not one per read), so a caller sending its
    ClientHello a byte at a time, each within the timeout, is cut at it and holds no agent thread longer."""
    import socket
    import time

    identity = asyncio.run(certificate_for(authority(), "agent-a", "uid-a", "node-a"))
    root = tmp_path / "agent"
    node = checkpointer.Node(root / "runsc", root / "runsc-root", root / "state", root / "checkpoints")
    agent = server.Agent(node, lambda token, audience: {}, "operator", "aud")
    httpd = server.serve(agent, "127.0.0.1", 0, socket_timeout=1.0, context=tls.server_context(identity))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    hello = b"\x16\x03\x01\x00\xc8\x01\x00\x00\xc4\x03\x03" + b"\x00" * 64
    try:
        with socket.create_connection(("127.0.0.1", httpd.server_address[1]), timeout=10) as caller:
            started = time.monotonic()
            closed_after = None
            for byte in hello:
                try:
                    caller.sendall(bytes([byte]))
                    caller.settimeout(0.5)
                    if caller.recv(1) == b"":
                        closed_after = time.monotonic() - started
                        break
                except TimeoutError:
                    continue  # the agent still waits for more: drip the next byte
                except OSError:
                    closed_after = time.monotonic() - started
                    break
                if time.monotonic() - started > 8:
                    break
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
    assert closed_after is not None and closed_after < 3.0, "the dripped handshake was still served after 8 s"
