"""The node agents' certificates, the API side (issue 49 item 5): the CA in its Secret, and the signer that
answers each agent's CertificateSigningRequest (what it decides: decisions/agent_certificates.py).

The Secret ships empty with the node agent's component (RBAC ``get``/``patch`` by name); the first replica to
need it fills it at the Secret's resourceVersion, and every other replica reads the winner's CA, so every
replica trusts, and signs with, the same one.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from typing import Any, Protocol

from agentsession_api import node_agent
from agentsession_operator.decisions import agent_certificates as decide
from agentsession_operator.infra import agent_ca
from agentsession_operator.infra.logs import logger

_log = logger(component="nodeagent-signer")

AGENT_CA_SECRET = "agentsession-nodeagent-ca"
"""The Secret's name in the operator's namespace (config/components/nodeagent ships it empty)."""


class SecretStore(Protocol):
    async def get_secret_data(self, namespace: str, name: str) -> tuple[dict[str, str], str] | None: ...

    async def fill_secret(self, namespace: str, name: str, data: dict[str, str], resource_version: str) -> bool: ...


class CertificateAPI(Protocol):
    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]: ...

    async def answer_certificate_request(
        self, csr: dict[str, Any], approved: bool, reason: str, message: str
    ) -> dict[str, Any] | None: ...

    async def issue_certificate(self, csr: dict[str, Any], certificate_pem: bytes) -> bool: ...


class NoAuthority(RuntimeError):
    """The CA's Secret is missing (it comes with the node agent's component) or cannot be filled."""


class Authority:
    """The CA every replica shares, read (or made) once and kept."""

    def __init__(self, secrets: SecretStore, namespace: str, name: str, attempts: int = 5) -> None:
        self.secrets = secrets
        self.namespace, self.name = namespace, name
        self.attempts = attempts
        self._ca: agent_ca.AgentCA | None = None
        self._context: ssl.SSLContext | None = None
        self._lock = asyncio.Lock()

    async def ca(self) -> agent_ca.AgentCA:
        async with self._lock:
            if self._ca is None:
                self._ca = await self._load()
            return self._ca

    async def client_context(self) -> ssl.SSLContext:
        """TLS for the operator's requests to the agents: this CA alone is trusted."""
        if self._context is None:
            self._context = (await self.ca()).client_context()
        return self._context

    async def _load(self) -> agent_ca.AgentCA:
        where = f"Secret {self.namespace}/{self.name}"
        for _ in range(self.attempts):
            found = await self.secrets.get_secret_data(self.namespace, self.name)
            if found is None:
                raise NoAuthority(
                    f"{where} not found: it comes with the node agent's component (or the chart); apply it"
                )
            data, version = found
            kept = agent_ca.AgentCA.from_secret_data(data)
            if kept is not None:
                return kept
            fresh = agent_ca.new_ca()
            if await self.secrets.fill_secret(self.namespace, self.name, fresh.secret_data(), version):
                _log.info("node agents' CA made", secret=f"{self.namespace}/{self.name}")
                return fresh
            # Another replica filled it first: read its CA.
        raise NoAuthority(f"{where}: no CA after {self.attempts} attempts")


class Signer:
    """Answers the node agents' certificate requests: signs an agent pod's own for its node, denies others."""

    def __init__(self, api: CertificateAPI, authority: Authority, namespace: str, selector: str) -> None:
        self.api = api
        self.authority = authority
        self.namespace, self.selector = namespace, selector

    async def answer(self, csr: dict[str, Any]) -> str:
        """What was done with ``csr``: "" (not ours, or answered already), "signed", or "denied"."""
        if not decide.open_request(csr):
            return ""
        name = str((csr.get("metadata") or {}).get("name", ""))
        verdict = decide.judge(csr, await self.api.list_pods(self.namespace, self.selector))
        if isinstance(verdict, decide.Refusal):
            if not decide.approved(csr):  # approved by someone else: never signed, and no longer deniable
                await self.api.answer_certificate_request(csr, False, verdict.reason, verdict.message)
            _log.warning("node agent certificate request denied", csr=name, reason=verdict.reason, why=verdict.message)
            return "denied"
        ca = await self.authority.ca()
        request = base64.b64decode((csr.get("spec") or {}).get("request") or "")
        asked = (csr.get("spec") or {}).get("expirationSeconds")
        longest = node_agent.CERTIFICATE_SECONDS
        seconds = min(int(asked), longest) if isinstance(asked, int) else longest
        try:
            certificate = ca.sign(request, node_agent.server_name(verdict.node), seconds)
        except agent_ca.BadRequest as err:
            await self.api.answer_certificate_request(csr, False, "BadRequest", str(err))
            return "denied"
        approved: dict[str, Any] | None = csr
        if not decide.approved(csr):
            approved = await self.api.answer_certificate_request(
                csr, True, "NodeAgent", f"pod {verdict.pod}, the node agent on node {verdict.node}"
            )
        if approved is None or not await self.api.issue_certificate(approved, certificate):
            return ""  # another replica answered it
        _log.info("node agent certificate signed", csr=name, node=verdict.node, pod=verdict.pod)
        return "signed"
