"""The client's router and tunnel connection modes, through agent-sandbox's sandbox router (real node only).

The real node runs the router as upstream deploys it (svc/sandbox-router-svc in agent-sandbox-system, with
upstream's default `--authz-mode=allow-all`); the client sends it the X-Sandbox-* headers, including the pod
IP, so no cluster DNS is needed. The router forwards to whatever session a caller names, so the operator
admits it to no sandbox unless told to (issue 28 item 3): the first test is the attack with the operator as
shipped, the others restart it with the router admitted (conftest.ROUTER_ARGS).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig, SandboxLocalTunnelConnectionConfig

from devcluster import build
from devcluster.realnode import network
from langchain_k8s_client import AgentSessionSandbox
from testkit import manifests
from tests.e2e.conftest import ROUTER_ARGS, Kube, OperatorProcess

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]


def _router_url(kube: Kube) -> str:
    service = kube.get("service", "sandbox-router-svc", "agent-sandbox-system")
    assert service is not None, "the real node deploys the sandbox router"
    return f"http://{service['spec']['clusterIP']}:8080"


def _admit_the_test_host_to_the_router(kube: Kube) -> None:
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


def closed_pool(kube: Kube, namespace: str) -> str:
    """A warm pool (its name) whose template's own policy closes its pods from their start (`networkPolicy: {}`,
    what docs/security.md tells a real cluster to set). A refusal test needs it: on the example pool (Unmanaged:
    open) a call could land between the session's Ready and its policy being programmed, and one did in CI."""
    template = manifests.template("closed-py", manifests.PYTHON_RUNTIME_IMAGE)
    template["spec"].update(networkPolicyManagement="Managed", networkPolicy={})
    kube.apply(template, manifests.warm_pool("closed-pool", "closed-py", 0), namespace=namespace)
    return "closed-pool"


def test_tenant_b_is_refused_through_the_router_by_default(
    kube: Kube, pool_namespace: str, operator: OperatorProcess
) -> None:
    """Tenant A's session; tenant B (here the test host, which the router admits as it would admit any pod
    of a gateway namespace) names A's sandbox in the router's headers. Before: every session's
    NetworkPolicy admitted the router's pods, and upstream's router authorizes everyone: B ran commands in
    A's sandbox. Now the operator admits no router unless configured: B's call never reaches the pod."""
    import httpx

    from langchain_k8s_client.endpoints import router_headers
    from langchain_k8s_client.sessions import SessionView

    _admit_the_test_host_to_the_router(kube)
    router = _router_url(kube)
    with AgentSessionSandbox("tenant-a", pool_namespace, warm_pool=closed_pool(kube, pool_namespace)) as backend:
        assert backend.execute("echo mine", timeout=30).output.strip() == "mine"  # A's own client reaches it
        session = kube.get("agentsession", "tenant-a", pool_namespace)
        assert session is not None
        view = SessionView.of(session)
        headers = router_headers(view, 8888)
        body = {"command": "echo tenant b was here"}
        try:
            answer = httpx.post(f"{router}/execute", json=body, headers=headers, timeout=20)
        except httpx.TransportError as exc:  # the router gave up on the pod and closed
            answer = None
            print(f"refused: {exc!r}")
        assert answer is None or (answer.status_code >= 500 and "tenant b was here" not in answer.text), (
            answer.status_code,
            answer.text[:300],
        )


@pytest.fixture(scope="module")
def router_operator(operator: OperatorProcess) -> Iterator[OperatorProcess]:
    """The shared operator restarted with the router admitted, and back as shipped afterwards."""
    operator.stop()
    operator.extra_args += ROUTER_ARGS
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()
        operator.extra_args = [a for a in operator.extra_args if a not in ROUTER_ARGS]
        operator.start()


def test_router_mode_reaches_the_session_through_the_router(
    kube: Kube, pool_namespace: str, router_operator: OperatorProcess
) -> None:
    router = _router_url(kube)
    _admit_the_test_host_to_the_router(kube)
    connection = SandboxDirectConnectionConfig(api_url=router)
    with AgentSessionSandbox("via-router", pool_namespace, warm_pool="python-pool", connection=connection) as backend:
        result = backend.execute("echo through the router; hostname", timeout=30)
        assert result.exit_code == 0 and "through the router" in result.output, result
        assert backend.session.pod_name in result.output


def test_tunnel_mode_port_forwards_to_the_router(
    kube: Kube, pool_namespace: str, router_operator: OperatorProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK runs `kubectl port-forward svc/sandbox-router-svc`: the kubectl matching the API server.
    monkeypatch.setenv("PATH", f"{build.KUBERNETES.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    connection = SandboxLocalTunnelConnectionConfig()
    with AgentSessionSandbox("via-tunnel", pool_namespace, warm_pool="python-pool", connection=connection) as backend:
        result = backend.execute("echo through the tunnel", timeout=30)
        assert result.exit_code == 0 and "through the tunnel" in result.output, result
