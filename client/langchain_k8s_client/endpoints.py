"""Turn a session's status into a `PodEndpoint`, for each way of reaching the pod.

- pod IP (default, `SandboxInClusterConnectionConfig`): `http://<status.podIPs[0]>:<port>`.
- router (`SandboxDirectConnectionConfig` with `api_url`, or `SandboxGatewayConnectionConfig`): the
  router's URL plus the `X-Sandbox-*` headers it routes by.
- tunnel (`SandboxLocalTunnelConnectionConfig`): `kubectl port-forward` to the router Service.
The SDK's own connection strategies find the router URL (gateway address, tunnel); the sandbox
lookup itself comes from the session status, never from reading Sandboxes or claims.

Whichever the mode, the endpoint names the pod the status names and, unless `pod_identity="address"`, the
identity token that pod must show (`pod_identity`): a router or a stale IP that leads elsewhere gets nothing.

Router modes, when the operator publishes a credential issuer: the router is told the Sandbox by name and UID
(never the pod IP, which no token signs) and each request carries its own token (`router_credentials`).

The pod IP needs nothing beyond this package; the other modes take the SDK's configs and strategies,
from the optional `langchain-k8s-client[agent-sandbox]` (the SDK pulls prometheus-client, which the
client itself never does).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentsession_api.router_access import SANDBOX_UID_HEADER
from langchain_k8s_client.cluster_keys import keys_of
from langchain_k8s_client.errors import RouterAccessRefused, RouterUnreachable
from langchain_k8s_client.pod_identity import PodIdentity, PodIdentityMode
from langchain_k8s_client.protocol import RUNTIME_PORT
from langchain_k8s_client.router_credentials import NO_BEARER, IssuerLocation, RouterCredentials, bearer_of
from langchain_k8s_client.sessions import SessionView, load_api_client
from langchain_k8s_client.transport import PodEndpoint

if TYPE_CHECKING:
    from k8s_agent_sandbox.models import (
        SandboxDirectConnectionConfig,
        SandboxGatewayConnectionConfig,
        SandboxInClusterConnectionConfig,
        SandboxLocalTunnelConnectionConfig,
    )

    Connection = (
        SandboxInClusterConnectionConfig
        | SandboxDirectConnectionConfig
        | SandboxGatewayConnectionConfig
        | SandboxLocalTunnelConnectionConfig
    )


def _pod_ip_mode(connection: Any) -> bool:
    return connection is None or type(connection).__name__ == "SandboxInClusterConnectionConfig"


def router_headers(view: SessionView, port: int) -> dict[str, str]:
    headers = {
        "X-Sandbox-ID": view.sandbox_name or view.pod_name or "",
        "X-Sandbox-Namespace": view.namespace,
        "X-Sandbox-Port": str(port),
    }
    if view.pod_ips:
        headers["X-Sandbox-Pod-IP"] = view.pod_ips[0]
    return headers


class EndpointResolver:
    """Per-connection-mode resolution; keeps the router URL (and tunnel process) across pod changes."""

    def __init__(
        self,
        connection: Connection | None,
        namespace: str,
        api_client: Any = None,
        pod_identity: PodIdentityMode = "token",
    ) -> None:
        if pod_identity not in ("token", "address"):
            raise ValueError(f"pod_identity must be 'token' or 'address', got {pod_identity!r}")
        self.connection = connection  # None: the pod IP on the runtime's port
        self.namespace = namespace
        self.api_client = api_client
        self.pod_identity = pod_identity
        self._strategy: Any = None
        self._issuer: IssuerLocation | bool | None = False  # False: not read yet; None: the operator runs none
        self._credentials: RouterCredentials | None = None

    def _identity(self, view: SessionView) -> PodIdentity | None:
        if self.pod_identity == "address":
            return None
        if self.api_client is None:
            self.api_client = load_api_client()
        return PodIdentity(view.namespace, view.pod_name or "", keys_of(self.api_client))

    def _router_url(self, view: SessionView) -> str:
        if self._strategy is None:
            from k8s_agent_sandbox import connector
            from k8s_agent_sandbox.models import (
                SandboxDirectConnectionConfig,
                SandboxGatewayConnectionConfig,
                SandboxLocalTunnelConnectionConfig,
            )

            conn = self.connection
            if isinstance(conn, SandboxDirectConnectionConfig):
                self._strategy = connector.DirectConnectionStrategy(conn)
            elif isinstance(conn, SandboxGatewayConnectionConfig):
                from k8s_agent_sandbox.k8s_helper import K8sHelper

                self._strategy = connector.GatewayConnectionStrategy(conn, K8sHelper())
            elif isinstance(conn, SandboxLocalTunnelConnectionConfig):
                self._strategy = connector.LocalTunnelConnectionStrategy(
                    view.sandbox_name or view.name, self.namespace, conn, api_client=self.api_client
                )
            else:
                raise TypeError(f"unsupported connection config {type(conn).__name__}")
        try:
            return str(self._strategy.connect())
        except Exception as exc:  # the SDK's own errors (SandboxPortForwardError, TimeoutError, ...)
            raise RouterUnreachable(_mode_name(self.connection), exc) from exc

    def resolve(self, view: SessionView) -> PodEndpoint:
        conn = self.connection
        port = conn.server_port if conn is not None else RUNTIME_PORT
        if _pod_ip_mode(conn):
            ip = view.pod_ips[0]
            host = f"[{ip}]" if ":" in ip else ip
            return PodEndpoint(
                f"http://{host}:{port}",
                expected_hostname=view.pod_name,
                expected_ips=tuple(view.pod_ips),
                identity=self._identity(view),
            )
        url = self._router_url(view)
        headers = router_headers(view, port)
        credentials = self._router_credentials(view, port)
        if credentials is not None:  # v2 tokens bind the Sandbox's UID and refuse a pod IP
            grant = credentials.sandbox()
            headers = {key: value for key, value in headers.items() if key != "X-Sandbox-Pod-IP"}
            headers.update({"X-Sandbox-ID": grant.sandbox, SANDBOX_UID_HEADER: grant.sandbox_uid})
        headers.update(getattr(conn, "extra_headers", None) or {})  # SandboxDirectConnectionConfig
        return PodEndpoint(
            url,
            headers=headers,
            expected_hostname=view.pod_name,
            expected_ips=tuple(view.pod_ips),
            identity=self._identity(view),
            credentials=credentials,
        )

    def _router_credentials(self, view: SessionView, port: int) -> RouterCredentials | None:
        """Fresh credentials for this resolution (a new pod may be a new Sandbox), when an issuer is published."""
        if self.api_client is None:
            try:
                self.api_client = load_api_client()
            except Exception:  # no cluster configured: no issuer to ask (an authorizing router refuses)
                return None
        if self._issuer is False:
            self._issuer = IssuerLocation.published(self.api_client)
        if not isinstance(self._issuer, IssuerLocation):
            return None
        api_client = self.api_client
        if not bearer_of(api_client):
            raise RouterAccessRefused(NO_BEARER)
        if self._credentials is not None:
            self._credentials.close()
        self._credentials = RouterCredentials(
            self._issuer, lambda: bearer_of(api_client), view.namespace, view.name, port
        )
        return self._credentials

    def close(self) -> None:
        if self._credentials is not None:
            self._credentials.close()
            self._credentials = None
        if self._strategy is not None:
            self._strategy.close()
            self._strategy = None


def _mode_name(conn: Connection | None) -> str:
    """`tunnel`, `gateway` or `router`: how the client reaches the sandbox router."""
    name = type(conn).__name__
    return "tunnel" if "LocalTunnel" in name else "gateway" if "Gateway" in name else "router"
