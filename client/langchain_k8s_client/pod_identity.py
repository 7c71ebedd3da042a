"""The pod proves which pod it is before the client sends it anything of the session.

A pod name is unique only within a namespace and an IP only while its pod lives, so what a pod says about
itself (its name, its addresses) cannot tell a session's pod from a namesake in another namespace at the IP a
stale status names. What it cannot say falsely is its identity token: a projected ServiceAccount token that
the kubelet mints for that pod alone (`agentsession_api.names.POD_IDENTITY_VOLUME` in its template), signed
with the cluster's ServiceAccount keys, naming its namespace and pod. Its audience is ours, so the API server
itself refuses it: showing it to a client grants nothing.

The client checks the signature against the keys the API server publishes (`/openid/v1/jwks`, readable by
every ServiceAccount by default; fetched by `cluster_keys`), the audience, the validity window, and that the
namespace and pod named are the session's. Pure: no I/O here.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from dataclasses import dataclass
from typing import Any, Literal

from agentsession_api.names import POD_IDENTITY_AUDIENCE, POD_IDENTITY_VOLUME

from .errors import UnverifiedPod
from .protocol import CLOCK_SKEW, MAX_TOKEN_BYTES

PodIdentityMode = Literal["token", "address"]
"""`token` (default): the pod must show its identity token. `address`: trust its name and addresses alone
(templates without the identity volume; a namesake at a reused IP is then not told apart)."""


@dataclass
class ClusterKeys:
    """The cluster's ServiceAccount token verification keys, by key ID, as fetched from `host` at `fetched_at`
    (`cluster_keys.keys_of` fetches and caches them). `stale`: a token named a key the set lacks, so the
    cluster may have added one; the next fetch comes sooner."""

    keys: dict[str, Any]
    fetched_at: float = 0.0
    host: str = ""
    stale: bool = False

    @classmethod
    def parse(cls, jwks: Any, fetched_at: float = 0.0, host: str = "") -> ClusterKeys:
        keys: dict[str, Any] = {}
        for jwk in (jwks or {}).get("keys") or []:
            key = _public_key(jwk)
            if key is not None:
                keys[str(jwk.get("kid", ""))] = key
        return cls(keys, fetched_at, host)


@dataclass(frozen=True)
class PodIdentity:
    """What the pod reached must prove: a token of the cluster's naming `namespace`/`pod_name`."""

    namespace: str
    pod_name: str
    keys: ClusterKeys

    def check(self, token: str, now: float | None = None) -> None:
        """Raise `UnverifiedPod` unless `token` proves the pod is this session's."""
        who = f"the session's pod {self.namespace}/{self.pod_name}"
        if not token:
            raise UnverifiedPod(
                f"the pod reached showed no identity token, so it cannot be told from a namesake: expected {who}. "
                f"Its SandboxTemplate needs the `{POD_IDENTITY_VOLUME}` volume (docs/security.md, pod identity), "
                "or pass pod_identity='address' to trust names and addresses alone"
            )
        claims = verify(token, self.keys, now=now)
        seen = claims.get("kubernetes.io") or {}
        namespace = seen.get("namespace")
        pod = (seen.get("pod") or {}).get("name")
        if namespace != self.namespace or pod != self.pod_name:
            raise UnverifiedPod(f"the pod reached is {namespace}/{pod} by its identity token, expected {who}")


def verify(token: str, keys: ClusterKeys, *, now: float | None = None) -> dict[str, Any]:
    """The claims of `token` once its signature, audience and validity window are checked."""
    if len(token) > MAX_TOKEN_BYTES:
        raise UnverifiedPod("the pod's identity token is too large")
    try:
        head_b64, body_b64, sig_b64 = token.split(".")
        header = json.loads(_unb64(head_b64))
        claims = json.loads(_unb64(body_b64))
        signature = _unb64(sig_b64)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise UnverifiedPod(f"the pod's identity token is malformed ({exc})") from exc
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise UnverifiedPod("the pod's identity token is malformed")
    key = keys.keys.get(str(header.get("kid", "")))
    if key is None:
        keys.stale = True  # the next endpoint resolution fetches the keys again
        raise UnverifiedPod(
            f"the pod's identity token is signed by key {header.get('kid')!r}, not one of the cluster's"
        )
    if not _signature_ok(key, str(header.get("alg")), f"{head_b64}.{body_b64}".encode(), signature):
        raise UnverifiedPod("the pod's identity token has a bad signature")
    audience = claims.get("aud")
    audiences = audience if isinstance(audience, list) else [audience]
    if POD_IDENTITY_AUDIENCE not in audiences:
        raise UnverifiedPod(f"the pod's identity token is for {audiences}, not {POD_IDENTITY_AUDIENCE}")
    at = time.time() if now is None else now
    exp, nbf = claims.get("exp"), claims.get("nbf", 0)
    if not isinstance(exp, (int, float)) or not isinstance(nbf, (int, float)):
        raise UnverifiedPod("the pod's identity token has no validity window")
    if at > exp + CLOCK_SKEW or at < nbf - CLOCK_SKEW:
        raise UnverifiedPod("the pod's identity token is expired or not yet valid")
    return claims


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _int(text: str) -> int:
    return int.from_bytes(_unb64(text), "big")


def _public_key(jwk: Any) -> Any:
    """An RSA or EC P-256/P-384 public key from a JWK; None for kinds the API server does not use."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    try:
        if jwk.get("kty") == "RSA":
            return rsa.RSAPublicNumbers(_int(jwk["e"]), _int(jwk["n"])).public_key()
        if jwk.get("kty") == "EC":
            curve = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1()}.get(jwk.get("crv"))
            if curve is not None:
                return ec.EllipticCurvePublicNumbers(_int(jwk["x"]), _int(jwk["y"]), curve).public_key()
    except (KeyError, ValueError, TypeError, binascii.Error):
        return None
    return None


def _signature_ok(key: Any, alg: str, signed: bytes, signature: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    digest = {"RS256": hashes.SHA256(), "ES256": hashes.SHA256(), "ES384": hashes.SHA384()}.get(alg)
    try:
        if isinstance(key, rsa.RSAPublicKey) and alg == "RS256":
            key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
            return True
        if isinstance(key, ec.EllipticCurvePublicKey) and alg in ("ES256", "ES384") and digest is not None:
            half = len(signature) // 2
            if half * 2 != len(signature) or half != (key.curve.key_size + 7) // 8:
                return False
            der = encode_dss_signature(int.from_bytes(signature[:half], "big"), int.from_bytes(signature[half:], "big"))
            key.verify(der, signed, ec.ECDSA(digest))
            return True
    except InvalidSignature:
        return False
    return False
