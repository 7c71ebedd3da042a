"""Minting upstream's scoped tokens (v2: Ed25519), and the key files on both sides. Pure: no I/O but reading a
key file.

A token names one target: the Sandbox (namespace, name, UID), the port, the HTTP method and the path; the
router refuses it for any other, and from its ``exp`` second on. The router holds only public keys (a JSON
key set: :func:`verification_keys`); the private key stays with the operator.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agentsession_api import router_access as ra

_PATH = re.compile(ra.TOKEN_PATH_PATTERN)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@dataclass(frozen=True)
class Target:
    """What one token authorizes (upstream's AuthorizationTarget)."""

    namespace: str
    sandbox: str
    sandbox_uid: str
    port: int
    method: str
    path: str


def refusal(method: str, path: str, port: int) -> str | None:
    """Why a (method, path, port) cannot be bound by a token; None when it can."""
    if method not in ra.TOKEN_METHODS:
        return f"method {method!r}: expected one of {', '.join(ra.TOKEN_METHODS)}"
    if not _PATH.match(path):
        return f"path {path[:80]!r}: expected an absolute path of letters, digits and ._~/- (no query)"
    if not 1 <= port <= 65535:
        return f"port {port}: expected 1 to 65535"
    return None


@dataclass(frozen=True)
class SigningKey:
    """The issuer's Ed25519 key and its key ID (what the router's key set names it)."""

    private: Ed25519PrivateKey
    kid: str

    @classmethod
    def load(cls, path: Path, kid: str = "") -> SigningKey:
        """A PEM (PKCS#8) Ed25519 private key; the key ID defaults to :func:`key_id` of its public key."""
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{path}: expected an Ed25519 private key (openssl genpkey -algorithm ed25519)")
        return cls(key, kid or key_id(key.public_key()))

    def mint(self, target: Target, expires: int) -> str:
        """The token for ``target`` valid until the Unix second ``expires`` (exclusive)."""
        claims = {
            "ns": target.namespace,
            "name": target.sandbox,
            "uid": target.sandbox_uid,
            "port": target.port,
            "method": target.method,
            "path": target.path,
            "exp": expires,
        }
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        signature = self.private.sign(f"{ra.SCOPED_TOKEN_SIGNING_CONTEXT}{self.kid}.{payload}".encode())
        return f"{ra.SCOPED_TOKEN_VERSION}.{self.kid}.{payload}.{_b64(signature)}"


def key_id(public: Ed25519PublicKey) -> str:
    """A stable key ID: the first 16 hex digits of the raw public key's SHA-256."""
    return hashlib.sha256(public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)).hexdigest()[
        :16
    ]


def verification_keys(keys: list[SigningKey]) -> str:
    """The router's ``--authz-scoped-token-verification-keys-file`` for ``keys`` (public halves only)."""
    entries = [
        {
            "kid": key.kid,
            "publicKey": _b64(
                key.private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            ),
        }
        for key in keys
    ]
    return json.dumps({"keys": entries})


def private_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
