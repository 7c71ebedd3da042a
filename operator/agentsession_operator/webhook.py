"""The validating admission webhook: AgentSessionPolicy enforced when an AgentSession is written.

The handler reads what the reconciler already keeps (its cache of policies, agent-sandbox's label
allowlist) and decides with admission.py, which reuses policy.py: one source of truth for every rule.

failurePolicy is Ignore: with the operator down (or slow, or broken) writes go through and the
reconciler re-checks each session before it creates a claim; a violating session ends Failed with
``PolicyCompliant=False`` and never gets one. For the same reason an unexpected error in the handler
admits the request (with a warning) instead of refusing it.

kopf manages the ValidatingWebhookConfiguration ``agentsession.dev`` (settings.admission.managed): it
creates it, patches in the webhook with its clientConfig and caBundle, and removes the webhook on a
clean shutdown (a killed operator leaves it behind, harmless with failurePolicy Ignore).

Wiring: ``__main__`` builds a :class:`WebhookConfig` from its flags, stores it in :data:`CONFIG` and
calls :func:`register`; the startup handler calls :func:`configure`. Nothing is registered on import,
so ``kopf run`` or KopfRunner over main.py runs without a webhook (kopf refuses admission handlers
without a server).
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
from kopf._cogs.structs.references import NamespaceName, match_namespace

from agentsession_operator import admission, policy
from agentsession_operator.logs import logger

HANDLER_ID = "policy"
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
    namespaces: tuple[str, ...] = ()
    """The operator's --namespace patterns: sessions elsewhere are not the operator's to judge."""

    @property
    def enabled(self) -> bool:
        return self.port != 0

    def url_host(self) -> str:
        return self.host or kopf.WebhookServer._get_accessible_addr(self.bind)

    def server_names(self) -> list[str]:
        """Names the serving certificate must carry (SANs)."""
        names = [self.url_host(), kopf.WebhookServer._get_accessible_addr(self.bind)]
        if self.service is not None:  # what the API server dials first, and the common name
            namespace, name, _ = self.service
            names = [f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local", f"{name}.{namespace}", *names]
        return list(dict.fromkeys(names))


CONFIG: WebhookConfig | None = None
"""Set by ``__main__`` before kopf starts; None: no webhook."""


def parse_service(text: str) -> tuple[str, str, int]:
    """``namespace/name`` or ``namespace/name:port`` (port of the Service, default 443)."""
    namespace, _, rest = text.partition("/")
    name, _, port = rest.partition(":")
    if not namespace or not name:
        raise ValueError(f"expected namespace/name[:port], got {text!r}")
    return namespace, name, int(port) if port else SERVICE_PORT


# ---- the handler ---------------------------------------------------------------------------------
def _watched(namespace: str | None) -> bool:
    patterns = CONFIG.namespaces if CONFIG is not None else ()
    if not patterns:
        return True
    return namespace is not None and any(match_namespace(NamespaceName(namespace), p) for p in patterns)


async def _sessions_for_count(reconciler: Any, session: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    """The namespace's sessions carrying the limited labels, read live (the cache may lag a burst of creates)."""
    effective = policy.effective_policy_for(session, list(reconciler.cache.policies.get(namespace, {}).values()))
    found: dict[str, dict[str, Any]] = {}
    try:
        for limit, value in policy.session_limits_for(session, effective):
            for other in await reconciler.kube.list_sessions(namespace, selector=f"{limit.key}={value}"):
                found[other["metadata"].get("uid") or other["metadata"]["name"]] = other
    except Exception as exc:  # the cache is the fallback: slightly stale beats not checking
        _log.warning("listing sessions for maxSessionsPerLabel failed; using the cache", error=str(exc)[:300])
        return [body for (ns, _), body in reconciler.cache.sessions.items() if ns == namespace]
    return list(found.values())


async def validate_session(
    *,
    body: kopf.Body,
    memo: Any,
    warnings: list[str],
    old: kopf.Body | None = None,
    operation: str | None = None,
    **_: Any,
) -> None:
    """Refuse an AgentSession CREATE/UPDATE that breaks an applicable AgentSessionPolicy."""
    session = dict(body)
    meta = session.get("metadata") or {}
    namespace = meta.get("namespace")
    if not namespace or not _watched(namespace) or operation not in ("CREATE", "UPDATE"):
        return
    try:
        reconciler = memo.reconciler
        policies = list(reconciler.cache.policies.get(namespace, {}).values())
        domains = await reconciler.label_domains()
        others: list[dict[str, Any]] = []
        if operation == "CREATE" and admission.needs_session_count(session, policies):
            others = await _sessions_for_count(reconciler, session, namespace)
        previous = dict(old) if old is not None else None
        violations = admission.review(session, policies, domains, others, operation, old=previous)
        if previous is not None and not violations:
            standing = admission.standing_violations(session, policies, domains, previous)
            warnings.extend(f"AgentSessionPolicy (not enforced on this update): {v}" for v in standing)
    except Exception as exc:  # failurePolicy Ignore in spirit: never refuse because we broke
        _log.exception("admission check failed; admitting", namespace=namespace, session=meta.get("name"))
        warnings.append(f"AgentSessionPolicy not checked at admission ({exc}); the operator checks it later")
        return
    if violations:
        _log.info(
            "admission refused",
            namespace=namespace,
            session=meta.get("name"),
            operation=operation,
            violations=violations,
        )
        raise kopf.AdmissionError(admission.refusal_message(violations), code=422)


_registered = False


def register(registry: kopf.OperatorRegistry | None = None) -> None:
    """Register :func:`validate_session` with kopf (once)."""
    global _registered
    if _registered:
        return
    kopf.on.validate(
        names.GROUP,
        names.VERSION,
        names.SESSION_PLURAL,
        id=HANDLER_ID,
        operations=["CREATE", "UPDATE"],
        ignore_failures=True,
        registry=registry,
    )(validate_session)
    _registered = True


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
