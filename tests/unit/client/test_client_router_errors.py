"""A connection mode whose way to the router fails raises the client's own typed error."""

from __future__ import annotations

import pytest
from k8s_agent_sandbox.exceptions import SandboxPortForwardError
from k8s_agent_sandbox.models import SandboxLocalTunnelConnectionConfig

from langchain_k8s_client import RouterUnreachable, TransportError
from langchain_k8s_client.endpoints import EndpointResolver
from langchain_k8s_client.sessions import SessionView


class _DeadTunnel:
    def connect(self) -> str:
        raise SandboxPortForwardError('kubectl port-forward exited: services "sandbox-router-svc" not found')


def test_tunnel_failure_is_a_typed_transport_error() -> None:
    resolver = EndpointResolver(SandboxLocalTunnelConnectionConfig(), "team-a")
    resolver._strategy = _DeadTunnel()  # what LocalTunnelConnectionStrategy does without a router Service
    view = SessionView.of(
        {
            "metadata": {"name": "s", "namespace": "team-a", "uid": "u-1"},
            "status": {"phase": "Ready", "podName": "s", "sandboxName": "s", "podIPs": ["198.18.0.9"]},
        }
    )
    with pytest.raises(RouterUnreachable) as caught:
        resolver.resolve(view)
    assert isinstance(caught.value, TransportError) and caught.value.maybe_delivered is False
    assert "sandbox-router-svc" in str(caught.value) and "tunnel" in str(caught.value)
