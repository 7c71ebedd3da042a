"""A scripted stand-in for the runtime's HTTP API, for httpx.MockTransport."""

from __future__ import annotations

import base64
import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from agentsession_api.names import POD_IDENTITY_AUDIENCE
from langchain_k8s_client import commands
from langchain_k8s_client.pod_sandbox import PodSandbox
from langchain_k8s_client.transport import PodEndpoint, RetryPolicy, RuntimeTransport

FAST_RETRY = RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)
BASE = "http://127.0.0.9:8888"

Answer = dict[str, object] | httpx.Response | Exception | Callable[[httpx.Request], httpx.Response]


def probe_stdout(hostname: str = "pod-0", base: str = "/app", runner: str = "timeout", addresses: str = "") -> str:
    """`addresses`: the probe's `v4=`/`v6=` lines (the pod's own addresses), none by default."""
    wrappers = " ".join(every_wrapper())
    extra = f"{addresses}\n" if addresses else ""
    return f"@LKCP\nbase={base}\nhost={hostname}\nrunner={runner}\nbase64=1\nsh=dash\n{extra}wrappers={wrappers}\n"


def every_wrapper() -> list[str]:
    """The names of every staged command wrapper: the fake pod has them all (no staging requests)."""
    names = []
    runners = [("timeout", "x"), ("timeout", "echo x"), ("python3", "x")]
    runners += [("none", "x"), ("none", "a; b"), ("none", "$$")]
    for runner, command in runners:
        for has_base64 in (True, False):
            options = {"timeout": 1, "max_output": 1, "staging_dir": "/s", "cwd": "", "has_base64": has_base64}
            names.append(commands.user_command(command, runner=runner, **options).wrapper)  # type: ignore[arg-type]
    return names


def wrapped(output: bytes = b"", code: int = 0, start: str = "100.00", end: str = "100.50") -> dict[str, object]:
    """The runtime's answer to a wrapped user command, as the in-pod wrapper prints it."""
    body = base64.encodebytes(output).decode("ascii")
    return {"stdout": f"@LKC {code} {start} {end}\n{body}", "stderr": "", "exit_code": 0}


def plain(stdout: str = "", stderr: str = "", exit_code: int = 0) -> dict[str, object]:
    return {"stdout": stdout, "stderr": stderr, "exit_code": exit_code}


@dataclass
class FakeRuntime:
    """Answers probes by itself; every other request consumes the next scripted answer."""

    hostname: str = "pod-0"
    runner: str = "timeout"
    addresses: str = ""
    answers: list[Answer] = field(default_factory=list)
    requests: list[httpx.Request] = field(default_factory=list)
    probe_failures: list[Exception] = field(default_factory=list)

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == "/execute" and "@LKCP" in self.command(request):
            if self.probe_failures:
                raise self.probe_failures.pop(0)
            return httpx.Response(
                200, json=plain(probe_stdout(self.hostname, runner=self.runner, addresses=self.addresses))
            )
        if not self.answers:
            raise AssertionError(f"unexpected request {request.method} {request.url}")
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, httpx.Response):
            return answer
        if callable(answer):
            return answer(request)
        return httpx.Response(200, json=answer)

    @staticmethod
    def command(request: httpx.Request) -> str:
        return str(json.loads(request.content)["command"])

    def argvs(self) -> list[list[str]]:
        """The argv of every non-probe /execute, as the runtime would split it."""
        out = []
        for request in self.requests:
            if request.url.path == "/execute":
                command = self.command(request)
                if "@LKCP" not in command:
                    out.append(shlex.split(command))
        return out

    def paths(self) -> list[str]:
        return [f"{r.method} {r.url.path}" for r in self.requests]

    def transport(self, **kwargs: object) -> RuntimeTransport:
        mock = httpx.MockTransport(self.handler)
        endpoint = kwargs.pop("endpoint", None) or PodEndpoint(BASE, expected_hostname=self.hostname)
        return RuntimeTransport(
            endpoint,  # type: ignore[arg-type]
            retry=FAST_RETRY,
            http=mock,
            async_http_factory=lambda: mock,
            **kwargs,  # type: ignore[arg-type]
        )

    def sandbox(self, **kwargs: object) -> PodSandbox:
        transport_kwargs = {k: kwargs.pop(k) for k in ("resolve_endpoint", "endpoint") if k in kwargs}
        return PodSandbox(sandbox_id="fake", transport=self.transport(**transport_kwargs), **kwargs)  # type: ignore[arg-type]


class ClusterSigner:
    """The cluster's ServiceAccount token signer, as far as a client sees it: the keys the API server serves at
    /openid/v1/jwks (`api_client()` answers that one request) and pod identity tokens signed with them."""

    def __init__(self, kind: str = "EC", kid: str = "k1") -> None:
        from cryptography.hazmat.primitives.asymmetric import ec, rsa

        self.kind, self.kid = kind, kid
        self.key: Any = (
            ec.generate_private_key(ec.SECP256R1()) if kind == "EC" else rsa.generate_private_key(65537, 2048)
        )
        self.jwks_requests = 0

    def jwks(self) -> dict[str, Any]:
        numbers = self.key.public_key().public_numbers()
        if self.kind == "EC":
            return {
                "keys": [
                    {
                        "kty": "EC",
                        "crv": "P-256",
                        "kid": self.kid,
                        "alg": "ES256",
                        "use": "sig",
                        "x": _b64(numbers.x.to_bytes(32, "big")),
                        "y": _b64(numbers.y.to_bytes(32, "big")),
                    }
                ]
            }
        n = numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")
        return {
            "keys": [
                {
                    "kty": "RSA",
                    "kid": self.kid,
                    "alg": "RS256",
                    "use": "sig",
                    "n": _b64(n),
                    "e": _b64(numbers.e.to_bytes(3, "big")),
                }
            ]
        }

    def token(
        self,
        namespace: str,
        pod: str,
        *,
        audience: str = POD_IDENTITY_AUDIENCE,
        lifetime: float = 3600,
        issued: float | None = None,
        **extra: Any,
    ) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding
        from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

        now = time.time() if issued is None else issued
        alg = "ES256" if self.kind == "EC" else "RS256"
        header = {"alg": alg, "kid": self.kid}
        claims = {
            "aud": [audience],
            "iss": "https://kubernetes.default.svc.cluster.local",
            "iat": int(now),
            "nbf": int(now),
            "exp": int(now + lifetime),
            "sub": f"system:serviceaccount:{namespace}:default",
            "kubernetes.io": {
                "namespace": namespace,
                "pod": {"name": pod, "uid": "3f1c"},
                "serviceaccount": {"name": "default", "uid": "9a2b"},
            },
            **extra,
        }
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}".encode()
        if self.kind == "EC":
            r, s = decode_dss_signature(self.key.sign(signing_input, ec.ECDSA(hashes.SHA256())))
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        else:
            signature = self.key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input.decode()}.{_b64(signature)}"

    def api_client(self) -> Any:
        """A stand-in for `kubernetes.client.ApiClient` of this signer's cluster: `pod_identity.read_jwks` reads
        its keys through `read_jwks` (test_client_pod_identity's `stand_in_keys` fixture; it also reads a real
        ApiClient's from a local server)."""
        signer = self

        class _ApiClient:
            configuration = type("Configuration", (), {"host": f"https://cluster-{id(signer)}"})()

            def read_jwks(self) -> bytes:
                signer.jwks_requests += 1
                return json.dumps(signer.jwks()).encode()

        return _ApiClient()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
