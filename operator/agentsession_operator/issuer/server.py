"""The issuer's HTTPS endpoint, and where it says it answers (the published ConfigMap).

TLS: the webhook's certificate when it comes from the shared Secret (one for every replica: clients trust
any of them), else a certificate generated at start (outside a cluster: one replica). The ConfigMap
``agentsession-router-issuer`` (shipped empty, patched by name) carries the URL and the CA; every
authenticated user may read it, as ``kube-root-ca.crt``, and the clients find the issuer there.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import aiohttp.web

from agentsession_api import router_access as ra
from agentsession_operator.admission import server as webhook_server
from agentsession_operator.infra import metrics
from agentsession_operator.infra.logs import logger
from agentsession_operator.issuer.issuer import Answer, Issuer, IssuerAPI, Seen
from agentsession_operator.issuer.tokens import SigningKey

_log = logger()
DEFAULT_PORT = 9444
DEFAULT_TTL = 300  # seconds: a stolen credential is worth at most this long, and a deleted session's too
MIN_TTL = 2 * ra.RENEW_MARGIN  # a token clients would renew at once is no cache at all
MAX_IN_FLIGHT = 32
"""Issuances under way at once (each is a TokenReview, a SubjectAccessReview and three GETs); more get 503."""


@dataclass(frozen=True)
class IssuerConfig:
    """The ``--router-token-*`` and ``--router-issuer-*`` flags."""

    key_file: Path
    key_id: str = ""
    bind: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    ttl: int = DEFAULT_TTL
    url: str = ""  # what clients dial; default https://<bind, loopback for a catch-all>:<port>
    configmap: tuple[str, str] = (ra.ISSUER_CONFIGMAP_NAMESPACE, ra.ISSUER_CONFIGMAP)

    def published_url(self) -> str:
        host = webhook_server.accessible_host(self.bind)
        host = f"[{host}]" if ":" in host else host
        return self.url or f"https://{host}:{self.port}"


class Publisher(IssuerAPI, Protocol):
    async def publish_config_map(self, namespace: str, name: str, data: dict[str, str]) -> bool: ...


def _tls(config: IssuerConfig, files: tuple[str, str, str] | None) -> tuple[ssl.SSLContext, bytes, str | None]:
    """(server context, CA to publish, a temporary directory to remove)."""
    directory = None
    if files is None:
        from urllib.parse import urlsplit

        names = [webhook_server.accessible_host(config.bind), urlsplit(config.published_url()).hostname or ""]
        directory = tempfile.mkdtemp(prefix="agentsession-issuer-")
        files = webhook_server.issue([n for n in dict.fromkeys(names) if n]).write(Path(directory))
    cert, key, ca = files
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context, Path(ca).read_bytes(), directory


class IssuerServer:
    """Serves :class:`Issuer` over HTTPS until :meth:`stop`."""

    def __init__(self, config: IssuerConfig, api: Publisher, seen: Seen | None = None) -> None:
        self.config = config
        self.api = api
        self.issuer = Issuer(api, SigningKey.load(config.key_file, config.key_id), config.ttl, seen=seen)
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._runner: aiohttp.web.AppRunner | None = None
        self._directory: str | None = None

    async def start(self, files: tuple[str, str, str] | None = None) -> None:
        context, ca, self._directory = _tls(self.config, files)
        app = aiohttp.web.Application(client_max_size=ra.MAX_BODY_BYTES)
        app.router.add_post(ra.TOKENS_PATH, self._post)  # {namespace} and {name}: aiohttp's own placeholders
        self._runner = aiohttp.web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await aiohttp.web.TCPSite(self._runner, self.config.bind, self.config.port, ssl_context=context).start()
        namespace, name = self.config.configmap
        data = {ra.ISSUER_URL_KEY: self.config.published_url(), ra.ISSUER_CA_KEY: ca.decode()}
        if not await self.api.publish_config_map(namespace, name, data):
            _log.warning(
                "router issuer not published: ConfigMap missing (config/ and the chart ship it empty)",
                configmap=f"{namespace}/{name}",
            )
        _log.info("router credential issuer serving", url=data[ra.ISSUER_URL_KEY], kid=self.issuer.key.kid)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None

    async def _post(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        if self._in_flight.locked():
            return _respond(Answer.refused(503, "busy", "the issuer is busy: try again in a second"))
        async with self._in_flight:
            try:
                body = json.loads(await request.read())
            except (ValueError, aiohttp.web.HTTPRequestEntityTooLarge):
                return _respond(Answer.refused(400, "bad_request", "expected a JSON body of at most 16 KiB"))
            auth = request.headers.get("Authorization", "")
            bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else None
            namespace, name = request.match_info["namespace"], request.match_info["name"]
            try:
                answer = await self.issuer.answer(bearer, namespace, name, body)
            except Exception as exc:  # the API server failed us: say so, never issue
                _log.warning("router token issuance failed", error=repr(exc), session=f"{namespace}/{name}")
                answer = Answer.refused(503, "error", "the issuer could not ask the API server: try again")
            if answer.status != 200:
                _log.info("router token refused", session=f"{namespace}/{name}", status=answer.status)
            return _respond(answer)


def _respond(answer: Answer) -> aiohttp.web.Response:
    metrics.ROUTER_TOKENS.labels(answer.outcome).inc()
    return aiohttp.web.json_response(answer.body, status=answer.status, headers={"Cache-Control": "no-store"})
