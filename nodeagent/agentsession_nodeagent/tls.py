"""The agent's serving certificate (issue 49 item 5): a key made here that never leaves the process, signed by
the operator's CA for this node (decisions/agent_certificates.py says whom the operator signs for).

At start the agent asks with a CertificateSigningRequest (signer ``agentsession.dev/nodeagent``) and serves
nothing until it is signed; after two thirds of the certificate's life it asks again and serves the new one
to every later connection. The key is held in memory only (a memfd: ``ssl`` loads keys from paths, and the
root filesystem is read-only).
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import ssl
import threading
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agentsession_api.node_agent import CERTIFICATE_SECONDS, SIGNER, server_name

CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
WAIT_SECONDS = 120.0
"""How long the agent waits for the operator to sign (an operator without --node-agent never does)."""


class API(Protocol):
    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]: ...


class NotSigned(RuntimeError):
    """The request was denied, failed, or not answered in time."""


@dataclass(frozen=True)
class Identity:
    cert: bytes
    key: bytes
    not_before: dt.datetime
    not_after: dt.datetime

    @classmethod
    def of(cls, cert_pem: bytes, key_pem: bytes) -> Identity:
        cert = x509.load_pem_x509_certificate(cert_pem)
        return cls(cert_pem, key_pem, cert.not_valid_before_utc, cert.not_valid_after_utc)

    def renew_at(self) -> dt.datetime:
        """Two thirds into its life."""
        return self.not_before + (self.not_after - self.not_before) * 2 / 3


def key_and_request(node: str) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, server_name(node)[:64])]))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, request.public_bytes(serialization.Encoding.PEM)


def obtain(
    api: API,
    node: str,
    wait: float = WAIT_SECONDS,
    poll: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Identity:
    """A new key and its certificate for ``node``, signed by the operator (NotSigned: denied or not in time)."""
    key_pem, request_pem = key_and_request(node)
    made = api.call(
        "POST",
        CSR_PATH,
        {
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "CertificateSigningRequest",
            "metadata": {
                "generateName": "agentsession-nodeagent-",
                "labels": {"app.kubernetes.io/name": "agentsession-nodeagent"},
            },
            "spec": {
                "request": base64.b64encode(request_pem).decode(),
                "signerName": SIGNER,
                "expirationSeconds": CERTIFICATE_SECONDS,
                "usages": ["digital signature", "server auth"],
            },
        },
    )
    name = str(made["metadata"]["name"])
    give_up = clock() + wait
    while True:
        status = api.call("GET", f"{CSR_PATH}/{name}").get("status") or {}
        for condition in status.get("conditions") or []:
            if condition.get("type") in ("Denied", "Failed"):
                raise NotSigned(f"certificate request {name} {condition['type']}: {condition.get('message', '')}")
        if status.get("certificate"):
            return Identity.of(base64.b64decode(status["certificate"]), key_pem)
        if clock() + poll > give_up:
            raise NotSigned(
                f"certificate request {name} not signed within {wait:.0f} s: is the operator running with "
                "--node-agent (it signs the agents' requests)?"
            )
        sleep(poll)


def server_context(identity: Identity) -> ssl.SSLContext:
    """TLS serving ``identity``, its key read from memory."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    fd = os.memfd_create("nodeagent-tls", os.MFD_CLOEXEC)
    try:
        os.write(fd, identity.cert + identity.key)
        context.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)
    return context


class Renewal:
    """Asks for a new certificate after two thirds of the current one's life, and hands the new context to
    ``serve`` (a failed request is asked again a minute later, the old certificate served meanwhile)."""

    def __init__(
        self, api: API, node: str, current: Identity, serve: Callable[[ssl.SSLContext], None], retry: float = 60.0
    ) -> None:
        self.api, self.node, self.current, self.serve, self.retry = api, node, current, serve, retry
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="certificate-renewal", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()

    def _run(self) -> None:
        while not self.stopped.wait(max(0.0, (self.current.renew_at() - dt.datetime.now(dt.UTC)).total_seconds())):
            try:
                fresh = obtain(self.api, self.node)
            except (NotSigned, urllib.error.URLError, OSError, KeyError, ValueError) as err:
                print(f"node agent: certificate renewal failed, asking again in {self.retry:.0f} s: {err}", flush=True)
                if self.stopped.wait(self.retry):
                    return
                continue
            self.current = fresh
            self.serve(server_context(fresh))
