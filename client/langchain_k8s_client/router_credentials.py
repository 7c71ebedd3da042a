"""Per-session credentials for agent-sandbox's router, from the operator's issuer (agentsession_api.router_access).

In router mode, when the operator publishes an issuer (the ConfigMap ``agentsession-router-issuer``), every
request carries a token bound to its method and path on the session's Sandbox (by UID) and port: the router
refuses anything else. The client shows the issuer its own Kubernetes bearer token (the API client's); RBAC
decides (``create agentsessions/connect``). Tokens are kept until shortly before they expire and asked for
again then: a deleted session's Sandbox is gone and its tokens with it.

The fixed paths (probe, execute, upload) come in one call and are reused; a download's path is new each time,
so each download asks for its own (one issuer call, measured in docs/performance.md). Sync; the async API asks
in a worker thread, and only on a miss.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import httpx

from agentsession_api import router_access as ra

from .errors import RouterAccessRefused
from .protocol import EXECUTE_PATH, HEALTH_PATH, UPLOAD_PATH

FIXED: Final = (("GET", HEALTH_PATH), ("POST", EXECUTE_PATH), ("POST", UPLOAD_PATH))
"""What every session's client sends: asked for together, once per token lifetime."""
RENEW_MARGIN: Final = ra.RENEW_MARGIN
ISSUER_TIMEOUT: Final = 15.0
NO_BEARER: Final = (
    "router credentials need a Kubernetes bearer token (a ServiceAccount's, a kubeconfig token or an exec "
    "plugin's); this API client authenticates otherwise (e.g. a client certificate)"
)


@dataclass(frozen=True)
class IssuerLocation:
    url: str
    ca: str

    @classmethod
    def published(cls, api_client: Any) -> IssuerLocation | None:
        """Where the operator publishes its issuer; None when it runs none (the router then gets no token)."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        try:
            cm = client.CoreV1Api(api_client).read_namespaced_config_map(
                ra.ISSUER_CONFIGMAP, ra.ISSUER_CONFIGMAP_NAMESPACE
            )
        except ApiException as exc:
            if exc.status in (403, 404):
                return None
            raise
        data = cm.data or {}
        url, ca = data.get(ra.ISSUER_URL_KEY), data.get(ra.ISSUER_CA_KEY)
        return cls(url.rstrip("/"), ca) if url and ca else None


def bearer_of(api_client: Any) -> str | None:
    """The API client's own bearer token (ServiceAccount, kubeconfig token or exec plugin), refreshed first."""
    configuration = getattr(api_client, "configuration", None)
    if configuration is None:
        return None
    hook = getattr(configuration, "refresh_api_key_hook", None)
    if hook is not None:
        hook(configuration)
    settings = configuration.auth_settings() if callable(getattr(configuration, "auth_settings", None)) else {}
    value = str((settings.get("BearerToken") or {}).get("value") or "")
    if not value:  # a configuration without auth_settings: its api_key as the client would send it
        keys, prefixes = (
            getattr(configuration, "api_key", None) or {},
            getattr(configuration, "api_key_prefix", None) or {},
        )
        name = next((k for k in ("BearerToken", "authorization") if keys.get(k)), "")
        value = f"{prefixes.get(name, '')} {keys.get(name, '')}".strip() if name else ""
    return value[7:].strip() if value[:7].lower() == "bearer " else (value or None)


@dataclass(frozen=True)
class Grant:
    sandbox: str
    sandbox_uid: str
    expires: int
    token: str


class RouterCredentials:
    """Tokens for one session's Sandbox on one port, asked of `issuer` with the caller's bearer token: `bearer`
    is asked for it at every issuer call (a ServiceAccount's projected token rotates within the hour)."""

    def __init__(
        self,
        issuer: IssuerLocation,
        bearer: Callable[[], str | None],
        namespace: str,
        session: str,
        port: int,
        clock: Any = time.time,
    ) -> None:
        self.issuer = issuer
        self.bearer = bearer
        self.namespace = namespace
        self.session = session
        self.port = port
        self.clock = clock
        self._grants: dict[tuple[str, str], Grant] = {}
        self._lock = threading.Lock()
        self._http: httpx.Client | None = None  # opened on the first call

    def _fresh(self, key: tuple[str, str]) -> Grant | None:
        grant = self._grants.get(key)
        return grant if grant is not None and grant.expires - self.clock() > RENEW_MARGIN else None

    def sandbox(self) -> Grant:
        """The fixed paths' grant (and with it the Sandbox's name and UID the router routes by)."""
        return self.grant("GET", HEALTH_PATH)

    def grant(self, method: str, path: str) -> Grant:
        """The token for (method, path), asked for together with any fixed path that needs renewing."""
        key = (method.upper(), path)
        with self._lock:
            grant = self._fresh(key)
            if grant is not None:
                return grant
            wanted = [key] + [k for k in FIXED if k != key and self._fresh(k) is None]
            got = self._ask(wanted)
            self._grants.update((k, g) for k, g in zip(wanted, got, strict=True) if k in FIXED)
            return got[0]

    async def agrant(self, method: str, path: str) -> Grant:
        key = (method.upper(), path)
        grant = self._fresh(key)
        return grant if grant is not None else await asyncio.to_thread(self.grant, method, path)

    def _ask(self, wanted: list[tuple[str, str]]) -> list[Grant]:
        path = ra.TOKENS_PATH.format(namespace=quote(self.namespace, safe=""), name=quote(self.session, safe=""))
        body = {"port": self.port, "requests": [{"method": m, "path": p} for m, p in wanted]}
        if self._http is None:
            context = ssl.create_default_context(cadata=self.issuer.ca)  # the published CA, nothing else
            self._http = httpx.Client(verify=context, timeout=ISSUER_TIMEOUT, trust_env=False)
        bearer = self.bearer()
        if not bearer:
            raise RouterAccessRefused(NO_BEARER)
        try:
            resp = self._http.post(
                self.issuer.url + path, content=json.dumps(body), headers={"Authorization": f"Bearer {bearer}"}
            )
        except httpx.HTTPError as exc:
            raise RouterAccessRefused(f"the router credential issuer at {self.issuer.url} failed: {exc}") from exc
        try:
            answer = resp.json()
        except ValueError:
            answer = {}
        if resp.status_code != 200:
            message = answer.get("message") if isinstance(answer, dict) else None
            raise RouterAccessRefused(
                f"router credentials for {self.namespace}/{self.session} refused (HTTP {resp.status_code}): "
                f"{message or resp.text[:200]}",
                status=resp.status_code,
            )
        tokens = answer.get("tokens")
        if not isinstance(tokens, list) or len(tokens) != len(wanted):
            raise RouterAccessRefused(f"the router credential issuer answered garbage: {resp.text[:200]!r}")
        return [
            Grant(str(answer["sandbox"]), str(answer["sandboxUID"]), int(answer["expires"]), str(t)) for t in tokens
        ]

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
