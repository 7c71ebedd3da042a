"""The client's router and tunnel connection modes, through agent-sandbox's sandbox router (real node only).

The real node runs the router as upstream deploys it (svc/sandbox-router-svc in agent-sandbox-system); the
client sends it the X-Sandbox-* headers, including the pod IP, so no cluster DNS is needed.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig, SandboxLocalTunnelConnectionConfig

from devcluster import build
from devcluster.realnode import network
from langchain_k8s_client import AgentSessionSandbox
from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]
EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.fixture(scope="module")
def pool_namespace(kube: Kube, operator: OperatorProcess) -> Iterator[str]:
    name = f"router-{uuid.uuid4().hex[:6]}"
    kube.run("create", "namespace", name)
    kube.run("apply", "-n", name, "-f", str(EXAMPLES / "00-python-pool.yaml"))
    yield name
    kube.run("delete", "namespace", name, "--wait=false", check=False)


def test_router_mode_reaches_the_session_through_the_router(kube: Kube, pool_namespace: str) -> None:
    service = kube.get("service", "sandbox-router-svc", "agent-sandbox-system")
    assert service is not None, "the real node deploys the sandbox router"
    router = f"http://{service['spec']['clusterIP']}:8080"
    # Upstream's NetworkPolicy admits the router's proxy port from pods only ("replace this from: clause
    # with your Gateway namespace"); this test's client is a process on the host, as a gateway outside the
    # cluster would be: admit that one address, as a user admits their gateway.
    kube.apply(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "router-from-the-test-host"},
            "spec": {
                "podSelector": {"matchLabels": {"app.kubernetes.io/name": "sandbox-router"}},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"ipBlock": {"cidr": f"{network.HOST_IP}/32"}}], "ports": [{"port": 8080}]}],
            },
        },
        namespace="agent-sandbox-system",
    )
    connection = SandboxDirectConnectionConfig(api_url=router)
    with AgentSessionSandbox("via-router", pool_namespace, warm_pool="python-pool", connection=connection) as backend:
        result = backend.execute("echo through the router; hostname", timeout=30)
        assert result.exit_code == 0 and "through the router" in result.output, result
        assert backend.session.pod_name in result.output


def test_tunnel_mode_port_forwards_to_the_router(
    kube: Kube, pool_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK runs `kubectl port-forward svc/sandbox-router-svc`: the kubectl matching the API server.
    monkeypatch.setenv("PATH", f"{build.KUBERNETES.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    connection = SandboxLocalTunnelConnectionConfig()
    with AgentSessionSandbox("via-tunnel", pool_namespace, warm_pool="python-pool", connection=connection) as backend:
        result = backend.execute("echo through the tunnel", timeout=30)
        assert result.exit_code == 0 and "through the tunnel" in result.output, result
