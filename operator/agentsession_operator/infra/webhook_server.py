"""The validating admission webhook's server: where it listens, its certificate, how kopf announces it.

The handler itself is handlers/admission.py; it decides with decisions/admission.py.

failurePolicy is Ignore: with the operator down (or slow, or broken) writes go through and the
reconciler re-checks each session before it creates a claim; a violating session ends Failed with
``PolicyCompliant=False`` and never gets one. For the same reason an unexpected error in the handler
admits the request (with a warning) instead of refusing it.

kopf manages the ValidatingWebhookConfiguration ``agentsession.dev`` (settings.admission.managed): it
creates it, patches in the webhook with its clientConfig and caBundle, and removes the webhook on a
clean shutdown (a killed operator leaves it behind, harmless with failurePolicy Ignore).

Wiring: ``cli`` builds a :class:`WebhookConfig` from its flags, passes it to kopf in the operator's
memo (``memo.webhook``) and registers the handler (handlers/admission.py); the startup handler calls
:func:`configure`. Nothing is registered on import, so ``kopf run`` or KopfRunner over the handlers runs
without a webhook (kopf refuses admission handlers without a server).
"""

from __future__ import annotations

import atexit
import datetime as dt
import ipaddress
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf

from agentsession_api import names
from agentsession_operator.infra.logs import logger

MANAGED_CONFIGURATION = names.GROUP
"""Name of the ValidatingWebhookConfiguration kopf creates and keeps current (RBAC names it too)."""
DEFAULT_PORT = 9443
SERVICE_PORT = 443
CERT_VALIDITY = dt.timedelta(days=365)

_log = logger(component="webhook")


@dataclass(frozen=True)
class WebhookConfig:
    """Where the webhook listens, how the API server reaches it, and with which certificate."""

    port: int = DEFAULT_PORT
    bind: str = "0.0.0.0"
    host: str | None = None
    """Host in the webhook URL the API server calls; default: derived from ``bind`` (0.0.0.0: 127.0.0.1)."""
    cert: str | None = None
    key: str | None = None
    ca: str | None = None
    """CA bundle for the API server; default: the certificate itself (or the generated CA)."""
    service: tuple[str, str, int] | None = None
    """(namespace, name, port): a Service clientConfig instead of a URL (in-cluster)."""

    @property
    def enabled(self) -> bool:
        return self.port != 0

    def url_host(self) -> str:
        return self.host or accessible_host(self.bind)

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
class ServiceWebhookServer(kopf.WebhookServer):
    """kopf's server, announcing a Service clientConfig (namespace/name/port) instead of a URL."""

    def __init__(self, *, service: tuple[str, str, int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.service = service

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        namespace, name, port = self.service
        async for url_config in super().__call__(fn):
            service = kopf.WebhookClientConfigService(namespace=namespace, name=name, port=port)
            if self.path:
                service["path"] = self.path.rstrip("/")
            config = kopf.WebhookClientConfig(service=service)
            if "caBundle" in url_config:
                config["caBundle"] = url_config["caBundle"]
            yield config


def self_signed(directory: Path, names: list[str]) -> tuple[Path, Path, Path]:
    """A throwaway CA and a serving certificate for ``names`` (DNS names or IPs): (cert, key, ca) files.

    kopf's own generator needs the ``certbuilder`` extra; ``cryptography`` is what this project ships.
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
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(subject("agentsession-operator webhook CA"))
        .issuer_name(subject("agentsession-operator webhook CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + CERT_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
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
    cert_path, key_path, ca_path = directory / "tls.crt", directory / "tls.key", directory / "ca.crt"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    key_path.touch(mode=0o600)
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path, ca_path


def build_server(config: WebhookConfig) -> kopf.WebhookServer:
    """The HTTPS server for ``config``: its certificate files, or a generated one in a temporary directory."""
    if config.cert and config.key:
        cert, key, ca = config.cert, config.key, config.ca  # ca None: kopf puts the certificate in caBundle
    elif config.cert or config.key:
        raise ValueError("--webhook-cert and --webhook-key go together")
    else:
        directory = Path(tempfile.mkdtemp(prefix="agentsession-webhook-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        cert_path, key_path, ca_path = self_signed(directory, config.server_names())
        cert, key, ca = str(cert_path), str(key_path), str(ca_path)
    kwargs: dict[str, Any] = {
        "addr": config.bind,
        "port": config.port,
        "host": config.url_host(),
        "certfile": cert,
        "pkeyfile": key,
        "cafile": ca,
    }
    if config.service is not None:
        return ServiceWebhookServer(service=config.service, **kwargs)
    return kopf.WebhookServer(**kwargs)


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


def configure(settings: kopf.OperatorSettings, config: WebhookConfig | None) -> None:
    """From the startup handler: serve the webhook and let kopf manage its configuration (when enabled)."""
    if config is None or not config.enabled:
        return
    settings.admission.server = build_server(config)
    settings.admission.managed = MANAGED_CONFIGURATION
    where = f"service {'/'.join(map(str, config.service))}" if config.service else config.url_host()
    _log.info("admission webhook enabled", bind=config.bind, port=config.port, reached_at=where)
