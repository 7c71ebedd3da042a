"""The validating admission webhook's server: where it listens, its certificate, how it is announced.

The handler itself is admission/handler.py; it decides with admission/rules.py.

The ValidatingWebhookConfiguration ``agentsession.dev`` is shipped (config/webhook/, the chart) with
``failurePolicy: Fail`` and a namespaceSelector that exempts the operator's namespace and kube-system.
kopf only serves (``settings.admission.managed`` stays None: it never creates the configuration nor
removes its webhooks at shutdown, which had switched admission off during every restart and rollout).
The operator patches the configuration it finds: each webhook's clientConfig (the Service, or a URL
when run outside the cluster) and caBundle (:class:`PublishingWebhookServer`, :func:`configuration_patch`);
RBAC grants ``get``/``patch`` on that one name, never ``create``.

The certificate: in a cluster, one for every replica and restart, from the Secret named by
``--webhook-cert-secret`` (generated once by the operator when the shipped Secret is still empty,
renewed when it nears expiry; or provided, e.g. by cert-manager); outside, a generated one per start.

Wiring: the settings build a :class:`WebhookConfig` from the flags (settings.py), ``cli`` passes it to kopf
in the operator's memo (``memo.state.webhook``, handlers/state.py) and registers the handler (admission/handler.py); the
startup handler reads the certificate (admission/certificate.py) and calls :func:`configure`. Nothing is
registered on import, so
``kopf run`` or KopfRunner over the handlers runs without a webhook (kopf refuses admission handlers
without a server).
"""

from __future__ import annotations

import atexit
import base64
import datetime as dt
import ipaddress
import shutil
import socket
import ssl
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp.web
import kopf

from agentsession_api import names
from agentsession_operator.infra import agent_ca
from agentsession_operator.infra.logs import logger

CONFIGURATION = names.GROUP
"""Name of the shipped ValidatingWebhookConfiguration the operator patches (RBAC names it too)."""
DEFAULT_PORT = 9443
SERVICE_PORT = 443
CERT_VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=30)
"""A certificate in the Secret that expires sooner than this is replaced at the next start."""

Publish = Callable[[kopf.WebhookClientConfig], Awaitable[None]]

_log = logger(component="webhook")


@dataclass(frozen=True)
class WebhookConfig:
    """Where the webhook listens, how the API server reaches it, and with which certificate."""

    port: int = DEFAULT_PORT
    bind: str = "127.0.0.1"
    host: str | None = None
    """Host in the webhook URL the API server calls; default: derived from ``bind`` (0.0.0.0: 127.0.0.1)."""
    cert: str | None = None
    key: str | None = None
    ca: str | None = None
    """CA bundle for the API server; default: the certificate itself (or the generated CA)."""
    service: tuple[str, str, int] | None = None
    """(namespace, name, port): a Service clientConfig instead of a URL (in-cluster)."""
    configuration: str | None = CONFIGURATION
    """The shipped ValidatingWebhookConfiguration to patch (clientConfig, caBundle); None: leave it alone."""
    cert_secret: tuple[str, str] | None = None
    """(namespace, name) of the Secret holding the certificate every replica shares."""
    generate: bool = True
    """Fill (or renew) the Secret when it holds no usable certificate; False: it is provided (cert-manager)."""
    client_ca: str | None = None
    """CA bundle (PEM file) that signed the API server's client certificate for webhooks: when set, a caller
    without a certificate from it is refused in the TLS handshake (it never reaches a handler)."""
    client_names: tuple[str, ...] = ()
    """With ``client_ca``: the certificate's common name or a DNS subjectAltName must be one of these
    (empty: any certificate the CA signed)."""

    @property
    def enabled(self) -> bool:
        return self.port != 0

    def url_host(self) -> str:
        return self.host or accessible_host(self.bind)

    def required_names(self) -> list[str]:
        """Names a certificate from the Secret must carry: what the API server dials."""
        if self.service is not None:
            namespace, name, _ = self.service
            return [f"{name}.{namespace}.svc"]
        return [self.url_host()]

    def server_names(self) -> list[str]:
        """Names the serving certificate must carry (SANs)."""
        names = [self.url_host(), accessible_host(self.bind)]
        if self.service is not None:  # what the API server dials first, and the common name
            namespace, name, _ = self.service
            names = [f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local", f"{name}.{namespace}", *names]
        return list(dict.fromkeys(names))


def accessible_host(bind: str) -> str:
    """The address a client dials for a listener on ``bind``: a catch-all address becomes loopback."""
    try:
        address = ipaddress.ip_address(bind)
    except ValueError:
        return bind
    if address.is_unspecified:
        return "::1" if address.version == 6 else "127.0.0.1"
    return bind


def parse_service(text: str) -> tuple[str, str, int]:
    """``namespace/name`` or ``namespace/name:port`` (port of the Service, default 443)."""
    namespace, _, rest = text.partition("/")
    name, _, port = rest.partition(":")
    if not namespace or not name:
        raise ValueError(f"expected namespace/name[:port], got {text!r}")
    return namespace, name, int(port) if port else SERVICE_PORT


# ---- the server ----------------------------------------------------------------------------------
class PublishingWebhookServer(kopf.WebhookServer):
    """kopf's server, announcing a Service clientConfig when given one, and publishing each clientConfig it
    yields into the shipped configuration (``publish``) before kopf sees it."""

    def __init__(
        self, *, service: tuple[str, str, int] | None = None, publish: Publish | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.service = service
        self.publish = publish

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        async for url_config in super().__call__(fn):
            config = url_config
            if self.service is not None:
                namespace, name, port = self.service
                service = kopf.WebhookClientConfigService(namespace=namespace, name=name, port=port)
                if self.path:
                    service["path"] = self.path.rstrip("/")
                config = kopf.WebhookClientConfig(service=service)
                if "caBundle" in url_config:
                    config["caBundle"] = url_config["caBundle"]
            if self.publish is not None:
                await self.publish(config)
            yield config

    @staticmethod
    async def _serve(fn: kopf.WebhookFn, request: aiohttp.web.Request) -> aiohttp.web.Response:
        """kopf's answer, on a connection closed after it (``Connection: close``).

        The API server pools keep-alive connections per Service, across replicas. A replica that stops
        (a rollout, a certificate renewal restarting the listener) closes the ones it holds; one the API
        server is writing a request to at that moment fails with EOF, and Go does not resend a POST, so
        the user's create is refused (CI saw it right after a rollout). A fresh TLS connection per review
        costs ~3.4 ms here (benchmarks/bench_webhook_connection.py: 3.9 vs 0.5 ms), beside an API write's
        tens of ms.
        """
        try:
            response = await kopf.WebhookServer._serve(fn, request)
        except aiohttp.web.HTTPException as refusal:
            refusal.headers[aiohttp.hdrs.CONNECTION] = "close"
            raise
        response.force_close()
        return response


def configuration_patch(
    client_config: Mapping[str, Any], hooks: Mapping[str, str], ca_bundle: bytes | None = None
) -> dict[str, Any]:
    """A strategic merge patch (merged by webhook name) setting each webhook's clientConfig.

    ``hooks`` maps a webhook's name in the configuration to the handler id kopf serves it under (the
    last path segment). A URL and a Service exclude each other, so the other one is removed.
    ``ca_bundle`` (PEM) replaces the server's own bundle: during a renewal it carries both CAs.
    """
    webhooks = []
    for hook, handler_id in hooks.items():
        config: dict[str, Any] = {}
        if client_config.get("service") is not None:
            service = dict(client_config["service"])
            service["path"] = f"{(service.get('path') or '').rstrip('/')}/{handler_id}"
            config["service"], config["url"] = service, None
        else:
            config["url"], config["service"] = f"{str(client_config.get('url') or '').rstrip('/')}/{handler_id}", None
        if ca_bundle is not None:
            config["caBundle"] = base64.b64encode(ca_bundle).decode()
        elif client_config.get("caBundle"):
            config["caBundle"] = client_config["caBundle"]
        webhooks.append({"name": hook, "clientConfig": config})
    return {"webhooks": webhooks}


@dataclass(frozen=True)
class CertBundle:
    """A serving certificate, its key and the CA bundle (PEM), as the Secret stores them."""

    cert: bytes
    key: bytes
    ca: bytes

    SECRET_KEYS = ("tls.crt", "tls.key", "ca.crt")

    def secret_data(self) -> dict[str, str]:
        """The Secret's ``data`` (base64 values)."""
        return {
            k: base64.b64encode(v).decode()
            for k, v in zip(self.SECRET_KEYS, (self.cert, self.key, self.ca), strict=True)
        }

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str] | None) -> CertBundle | None:
        """None when the Secret holds no certificate yet (the shipped one is empty)."""
        data = data or {}
        if not all(data.get(k) for k in ("tls.crt", "tls.key")):
            return None
        values = [base64.b64decode(data.get(k) or "") for k in cls.SECRET_KEYS]
        return cls(values[0], values[1], values[2] or values[0])

    def write(self, directory: Path) -> tuple[str, str, str]:
        """(cert, key, ca) files for kopf's server; the key readable by this user only."""
        cert, key, ca = directory / "tls.crt", directory / "tls.key", directory / "ca.crt"
        cert.write_bytes(self.cert)
        ca.write_bytes(self.ca)
        key.touch(mode=0o600)
        key.write_bytes(self.key)
        return str(cert), str(key), str(ca)


def unusable(bundle: CertBundle | None, names: list[str], now: dt.datetime) -> str | None:
    """Why ``bundle`` cannot serve ``names`` until ``now + RENEW_BEFORE`` (None: it can)."""
    if bundle is None:
        return "no certificate yet"
    from cryptography import x509

    try:
        leaf = x509.load_pem_x509_certificate(bundle.cert)
    except ValueError as err:
        return f"unreadable certificate ({err})"
    if leaf.not_valid_after_utc - now < RENEW_BEFORE:
        return f"expires {leaf.not_valid_after_utc:%Y-%m-%d}"
    try:
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "no subjectAltName"
    have = {str(v) for v in sans.get_values_for_type(x509.DNSName)}
    have |= {str(v) for v in sans.get_values_for_type(x509.IPAddress)}
    missing = [n for n in names if n not in have]
    return f"does not name {', '.join(missing)}" if missing else None


def issue(names: list[str], previous_ca: bytes | None = None) -> CertBundle:
    """A new CA and a serving certificate for ``names`` (DNS names or IPs).

    ``previous_ca`` (a renewal) stays in the bundle after the new CA, so a replica still serving the old
    certificate keeps being trusted until it restarts. kopf's own generator needs the ``certbuilder``
    extra; ``cryptography`` is what this project ships.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def subject(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    def san(name: str) -> x509.GeneralName:
        try:
            return x509.IPAddress(ipaddress.ip_address(name))
        except ValueError:
            return x509.DNSName(name)

    now = dt.datetime.now(dt.UTC)
    ca_cert, ca_key = agent_ca.self_signed_ca("agentsession-operator webhook CA", CERT_VALIDITY, now)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject(names[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + CERT_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([san(n) for n in names]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    if previous_ca:
        ca_pem += previous_ca.split(b"-----END CERTIFICATE-----")[0] + b"-----END CERTIFICATE-----\n"
    return CertBundle(
        cert=cert.public_bytes(serialization.Encoding.PEM),
        key=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
        ca=ca_pem,
    )


def self_signed(directory: Path, names: list[str]) -> tuple[Path, Path, Path]:
    """:func:`issue` written to ``directory``: (cert, key, ca) files."""
    cert, key, ca = issue(names).write(directory)
    return Path(cert), Path(key), Path(ca)


def temporary_files(bundle: CertBundle) -> tuple[str, str, str]:
    """``bundle`` in a private temporary directory, removed at exit (the root filesystem is read-only)."""
    directory = Path(tempfile.mkdtemp(prefix="agentsession-webhook-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return bundle.write(directory)


def build_server(
    config: WebhookConfig, files: tuple[str, str, str] | None = None, publish: Publish | None = None
) -> kopf.WebhookServer:
    """The HTTPS server for ``config``: with ``files`` (cert, key, CA: from the shared Secret), the flags'
    files, or a certificate generated into a temporary directory."""
    ca: str | None
    if files is not None:
        cert, key, ca = files
    elif config.cert and config.key:
        cert, key, ca = config.cert, config.key, config.ca  # ca None: kopf puts the certificate in caBundle
    elif config.cert or config.key:
        raise ValueError("--webhook-cert and --webhook-key go together")
    else:
        directory = Path(tempfile.mkdtemp(prefix="agentsession-webhook-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        cert_path, key_path, ca_path = self_signed(directory, config.server_names())
        cert, key, ca = str(cert_path), str(key_path), str(ca_path)
    # The API server's client certificate (its AdmissionConfiguration kubeConfigFile): required when
    # configured, so a pod that can reach the port gets no TLS session, let alone a policy's refusal text.
    client_auth: dict[str, Any] = (
        {"verify_mode": ssl.CERT_REQUIRED, "verify_cafile": config.client_ca} if config.client_ca else {}
    )
    return PublishingWebhookServer(
        service=config.service,
        publish=publish,
        addr=config.bind,
        port=config.port,
        host=config.url_host(),
        certfile=cert,
        pkeyfile=key,
        cafile=ca,
        **client_auth,
    )


def peer_names(sslpeer: Mapping[str, Any] | None) -> list[str]:
    """The common name(s) and DNS subjectAltNames of a verified peer certificate (``getpeercert()``)."""
    found = []
    for rdn in (sslpeer or {}).get("subject") or ():
        found += [str(value) for key, value in rdn if key == "commonName"]
    found += [str(value) for kind, value in (sslpeer or {}).get("subjectAltName") or () if kind == "DNS"]
    return found


def caller_refusal(config: WebhookConfig | None, sslpeer: Mapping[str, Any] | None) -> str | None:
    """Why this caller may not use the webhook (None: it may). Only with ``client_ca`` and ``client_names``:
    the TLS handshake already required a certificate the CA signed; this narrows it to named ones."""
    if config is None or not config.client_ca or not config.client_names:
        return None
    names = peer_names(sslpeer)
    if any(name in config.client_names for name in names):
        return None
    return "the caller's client certificate is not one this webhook accepts"


def ensure_port_free(config: WebhookConfig) -> None:
    """Fail fast (OSError) when something listens on the webhook port already.

    kopf binds with SO_REUSEPORT, so a second operator on the same port would silently share the
    API server's admission calls with the first; a plain bind here refuses to share.
    """
    if not config.enabled:
        return
    family = socket.AF_INET6 if ":" in config.bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR passes over TIME_WAIT leftovers of a previous run, never over a live listener.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((config.bind, config.port))


def configure(
    settings: kopf.OperatorSettings, config: WebhookConfig | None, server: kopf.WebhookServer | None = None
) -> None:
    """From the startup handler: serve the webhook (when enabled); kopf manages no configuration."""
    settings.admission.managed = None  # never create, never clean up at shutdown: the configuration is shipped
    if config is None or not config.enabled:
        return
    settings.admission.server = server or build_server(config)
    where = f"service {'/'.join(map(str, config.service))}" if config.service else config.url_host()
    _log.info("admission webhook enabled", bind=config.bind, port=config.port, reached_at=where)
