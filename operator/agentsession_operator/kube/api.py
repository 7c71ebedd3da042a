"""The operator's own Kubernetes API client: one aiohttp session, JSON in and out, credentials from the pod's
ServiceAccount or a kubeconfig.

Every call the operator makes is generic: a path, a verb, a JSON body, a JSON answer (kube/client.py).
kubernetes_asyncio did the same through its generated client, whose package imports every API and model
class it has (about 850 modules, 37 MiB of a replica's ~110 MiB at rest: issue 54 item 2), opened its
session with trust_env (a ~/.netrc and proxy lookup in a thread per call) and sent every request without a
timeout. Retries, Retry-After, timeouts and the leadership hold are kube/transport.py's, wrapped around
:meth:`ApiClient.request`.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import os
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD = 60.0  # seconds: a projected token is rotated in place (client-go re-reads it this often)
EXEC_TIMEOUT = 30.0  # seconds an exec credential plugin may take
USER_AGENT = "agentsession-operator"


class ApiException(Exception):
    """The API server answered other than 2xx (or a credential could not be had: status None)."""

    def __init__(
        self,
        status: int | None = None,
        reason: str | None = None,
        body: bytes | str = b"",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.body = body.decode(errors="replace") if isinstance(body, bytes) else body
        self.headers = dict(headers or {})
        super().__init__(status, reason)

    def __str__(self) -> str:
        text = f"({self.status}) Reason: {self.reason}"
        return f"{text}\nHTTP response body: {self.body[:2000]}" if self.body else text


class ConfigError(Exception):
    """No usable credentials: the message says what to fix."""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    data: bytes

    def json(self) -> Any:
        return json.loads(self.data) if self.data else None


@dataclass
class Credentials:
    """Where the API server is and how to prove who we are: a kubeconfig context's or the pod's."""

    server: str
    namespace: str = "default"
    ca_file: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    tls_server_name: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = None
    key_data: bytes | None = None
    token: str | None = None
    token_file: str | None = None
    exec_config: Mapping[str, Any] | None = None
    _read: tuple[float, str | None] = field(default=(0.0, None), repr=False)  # (when, token) of the last read

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(
            cafile=self.ca_file, cadata=self.ca_data.decode() if self.ca_data else None
        )
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_file or self.cert_data:
            _load_client_certificate(context, self.cert_file, self.key_file, self.cert_data, self.key_data)
        return context

    def bearer(self, now: float | None = None) -> str | None:
        """The bearer token to send now, if any: a token file is re-read at most every TOKEN_REREAD seconds, an
        exec plugin's token kept until shortly before it expires."""
        now = time.monotonic() if now is None else now
        when, token = self._read
        if self.token_file and (token is None or now - when >= TOKEN_REREAD):
            token = Path(self.token_file).read_text().strip() or None
            self._read = (now, token)
        elif self.exec_config is not None and (token is None or now >= when):
            token, lifetime = _run_exec_plugin(self.exec_config)
            self._read = (now + lifetime, token)
        return token if (self.token_file or self.exec_config is not None) else self.token

    def connection_info(self) -> dict[str, Any]:
        """kopf.ConnectionInfo's arguments: kopf's own client logs in with the same credentials."""
        return {
            "server": self.server,
            "ca_path": self.ca_file,
            "ca_data": self.ca_data,
            "insecure": self.insecure,
            "certificate_path": self.cert_file,
            "certificate_data": self.cert_data,
            "private_key_path": self.key_file,
            "private_key_data": self.key_data,
            "scheme": "Bearer" if self.token or self.token_file or self.exec_config is not None else None,
            "token": self.bearer(),
            "default_namespace": self.namespace,
        }


def load_credentials(environ: Mapping[str, str] | None = None) -> Credentials:
    """The pod's ServiceAccount when run in a cluster, else the current context of $KUBECONFIG (or
    ~/.kube/config); ConfigError says what is missing."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if host and port and (SERVICE_ACCOUNT / "token").exists():
        return in_cluster(host, port)
    paths = [p for p in (env.get("KUBECONFIG") or "").split(os.pathsep) if p] or [str(Path.home() / ".kube/config")]
    return from_kubeconfig(paths)


def in_cluster(host: str, port: str, directory: Path = SERVICE_ACCOUNT) -> Credentials:
    server_host = f"[{host}]" if ":" in host else host
    namespace_file = directory / "namespace"
    return Credentials(
        server=f"https://{server_host}:{port}",
        namespace=namespace_file.read_text().strip() if namespace_file.exists() else "default",
        ca_file=str(directory / "ca.crt"),
        token_file=str(directory / "token"),
    )


def from_kubeconfig(paths: Iterable[str], context: str | None = None) -> Credentials:
    """A kubeconfig's context (its current one by default), merged across `paths` as kubectl merges them:
    the first file that names a thing wins."""
    merged: dict[str, dict[str, Any]] = {"clusters": {}, "users": {}, "contexts": {}}
    current: str | None = None
    bases: dict[tuple[str, str], Path] = {}
    read_any = False
    for path in paths:
        try:
            doc = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError:
            continue
        read_any = True
        current = current or doc.get("current-context")
        for section in merged:
            for entry in doc.get(section) or []:
                if entry.get("name") not in merged[section]:
                    merged[section][entry["name"]] = entry.get(section[:-1]) or {}
                    bases[(section, entry["name"])] = Path(path).resolve().parent
    if not read_any:
        raise ConfigError(
            f"no kubeconfig at {', '.join(paths)} and not in a pod: set KUBECONFIG, or run the operator in-cluster"
        )
    name = context or current
    if not name or name not in merged["contexts"]:
        raise ConfigError(f"kubeconfig {', '.join(paths)}: no context {name!r}: set current-context")
    ctx = merged["contexts"][name]
    cluster, user = merged["clusters"].get(ctx.get("cluster", "")), merged["users"].get(ctx.get("user", ""), {})
    if not cluster or not cluster.get("server"):
        raise ConfigError(f"kubeconfig context {name!r} names no cluster with a server")

    def path_of(section: str, entry: str, value: str | None) -> str | None:
        return str(bases[(section, entry)] / value) if value else None

    def data_of(value: str | None) -> bytes | None:
        return base64.b64decode(value) if value else None

    cluster_name, user_name = ctx["cluster"], ctx.get("user", "")
    return Credentials(
        server=str(cluster["server"]).rstrip("/"),
        namespace=str(ctx.get("namespace") or "default"),
        ca_file=path_of("clusters", cluster_name, cluster.get("certificate-authority")),
        ca_data=data_of(cluster.get("certificate-authority-data")),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name"),
        cert_file=path_of("users", user_name, user.get("client-certificate")),
        key_file=path_of("users", user_name, user.get("client-key")),
        cert_data=data_of(user.get("client-certificate-data")),
        key_data=data_of(user.get("client-key-data")),
        token=user.get("token"),
        token_file=path_of("users", user_name, user.get("tokenFile")),
        exec_config=user.get("exec"),
    )


def _load_client_certificate(
    context: ssl.SSLContext, cert_file: str | None, key_file: str | None, cert: bytes | None, key: bytes | None
) -> None:
    """ssl loads a certificate chain from files only: inline data goes through a private file removed at once."""
    if cert_file:
        context.load_cert_chain(cert_file, key_file)
        return
    with tempfile.TemporaryDirectory(prefix="agentsession-tls-") as directory:
        chain = Path(directory) / "client.pem"
        chain.touch(mode=0o600)
        chain.write_bytes((cert or b"") + b"\n" + (key or b""))
        context.load_cert_chain(str(chain))


def _run_exec_plugin(config: Mapping[str, Any]) -> tuple[str, float]:
    """A client.authentication.k8s.io exec plugin's token and how long to keep it (seconds)."""
    command = [str(config.get("command") or ""), *(str(a) for a in config.get("args") or [])]
    env = {**os.environ, **{str(e["name"]): str(e["value"]) for e in config.get("env") or []}}
    info = {"apiVersion": config.get("apiVersion"), "kind": "ExecCredential", "spec": {"interactive": False}}
    env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
    try:
        done = subprocess.run(command, env=env, capture_output=True, timeout=EXEC_TIMEOUT, check=True)
        status = json.loads(done.stdout).get("status") or {}
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise ConfigError(f"kubeconfig exec plugin {command[0]!r} failed: {exc}") from exc
    if not status.get("token"):
        raise ConfigError(f"kubeconfig exec plugin {command[0]!r} gave no token (client certificates: not supported)")
    lifetime = 300.0
    if expiry := status.get("expirationTimestamp"):
        until = dt.datetime.fromisoformat(str(expiry).replace("Z", "+00:00"))
        lifetime = max(0.0, (until - dt.datetime.now(dt.UTC)).total_seconds() - 10)
    return str(status["token"]), lifetime


class ApiClient:
    """Requests to one API server over one aiohttp session (opened on first use, in the running loop)."""

    def __init__(self, credentials: Credentials, user_agent: str = USER_AGENT) -> None:
        self.credentials = credentials
        self.user_agent = user_agent
        self._ssl = credentials.ssl_context() if credentials.server.startswith("https") else None
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # trust_env False: no ~/.netrc or proxy lookup per call; the API server is reached directly.
            connector = aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else False, limit=100)
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False)
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        timeout: float | None = None,
    ) -> Answer:
        """One exchange; an answer other than 2xx raises ApiException with its status, reason and body."""
        headers = {"Accept": accept, "User-Agent": self.user_agent}
        bearer = self.credentials.bearer
        # An exec plugin may run a program (off the event loop); a token or its file is read in place.
        token = await asyncio.to_thread(bearer) if self.credentials.exec_config else bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body).encode()
        params = [(k, _query_value(v)) for k, v in query]
        async with self._open().request(
            method,
            self.credentials.server + path,
            params=params or None,
            data=data,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
            server_hostname=self.credentials.tls_server_name,
        ) as response:
            answer = Answer(response.status, response.headers, await response.read())
        if not 200 <= answer.status <= 299:
            raise ApiException(answer.status, response.reason, answer.data, answer.headers)
        return answer

    async def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """`request`'s answer decoded from JSON."""
        return (await self.request(method, path, **kwargs)).json()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _query_value(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)
