"""The node agents' CA, pure crypto (issue 49 item 5): made once, kept in a Secret (kube/agent_certificates.py);
it signs each agent's key for the agent's node, and is the one root the operator trusts when it connects to
an agent.

Nothing here reads the request's subject or names: the certificate's only name is the one the operator
decided (``agentsession_api.node_agent.server_name``); the request gives its public key alone, proven by its
signature.
"""

from __future__ import annotations

import base64
import datetime as dt
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY = dt.timedelta(days=3650)
"""The CA outlives any operator: replacing it means every agent asks again (restart the DaemonSet)."""


class BadRequest(ValueError):
    """A certificate request that is not a PEM CSR signed by its own key."""


@dataclass(frozen=True)
class AgentCA:
    cert: bytes
    key: bytes

    SECRET_KEYS = ("ca.crt", "ca.key")

    def secret_data(self) -> dict[str, str]:
        return {"ca.crt": base64.b64encode(self.cert).decode(), "ca.key": base64.b64encode(self.key).decode()}

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str] | None) -> AgentCA | None:
        """None while the shipped Secret is empty; a Secret holding something else is an error to fix."""
        data = data or {}
        if not data.get("ca.crt") and not data.get("ca.key"):
            return None
        ca = cls(base64.b64decode(data.get("ca.crt") or ""), base64.b64decode(data.get("ca.key") or ""))
        try:
            x509.load_pem_x509_certificate(ca.cert)
            serialization.load_pem_private_key(ca.key, password=None)
        except ValueError as err:
            raise ValueError(f"the node agents' CA Secret holds no usable ca.crt and ca.key: {err}") from err
        return ca

    def client_context(self) -> ssl.SSLContext:
        """TLS that trusts this CA alone and checks the name the caller gives (``server_hostname``)."""
        context = ssl.create_default_context(purpose=ssl.Purpose.SERVER_AUTH, cadata=self.cert.decode())
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context

    def sign(self, request_pem: bytes, name: str, seconds: int, now: dt.datetime | None = None) -> bytes:
        """A serving certificate for ``name`` alone, over the request's public key, valid ``seconds``."""
        try:
            request = x509.load_pem_x509_csr(request_pem)
        except ValueError as err:
            raise BadRequest(f"not a PEM certificate request: {err}") from err
        if not request.is_signature_valid:
            raise BadRequest("the request is not signed by its own key")
        ca_cert = x509.load_pem_x509_certificate(self.cert)
        ca_key = serialization.load_pem_private_key(self.key, password=None)
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
            raise ValueError("the node agents' CA key is not an EC key")
        now = now or dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name[:64])]))
            .issuer_name(ca_cert.subject)
            .public_key(request.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(min(now + dt.timedelta(seconds=seconds), ca_cert.not_valid_after_utc))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        return cert.public_bytes(serialization.Encoding.PEM)


def self_signed_ca(
    common_name: str, validity: dt.timedelta, now: dt.datetime
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A CA certificate (P-256, signs certificates only, no intermediate) and its key: the node agents' CA
    here, the webhook's in admission/server.py."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def new_ca(now: dt.datetime | None = None) -> AgentCA:
    cert, key = self_signed_ca("agentsession node agents CA", CA_VALIDITY, now or dt.datetime.now(dt.UTC))
    return AgentCA(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )
