"""A scripted stand-in for the runtime's HTTP API, for httpx.MockTransport."""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

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
