"""HTTP messages of the python runtime's API, without any I/O.

`HttpRequest`/`HttpResponse` are what the sans-IO operations in `runtime` yield
and receive; the drivers in `transport` turn them into httpx calls. The builders
and parsers here know the runtime's endpoints: `GET /`, `POST /execute`,
`POST /upload` (multipart, file name relative to the base dir) and
`GET /download/<relative path>`.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Final, Literal

from .errors import MalformedResponse

CONTROL_READ_TIMEOUT: Final = 30.0
"""Read timeout of short control requests (probe, staging cleanup, small scripts)."""

TRANSFER_READ_TIMEOUT: Final = 300.0
"""Read timeout of file transfers (between two received chunks, as httpx defines it)."""


@dataclass(frozen=True)
class HttpRequest:
    """One request to the runtime; `idempotent` requests may be retried by the driver."""

    method: Literal["GET", "POST"]
    path: str
    read_timeout: float
    idempotent: bool
    json_body: bytes | None = None  # already encoded: ASCII JSON, so lone surrogates survive
    upload: tuple[str, bytes] | None = None  # (multipart file name, content)


@dataclass(frozen=True)
class HttpResponse:
    status: int
    content: bytes


@dataclass(frozen=True)
class RuntimeExec:
    """The runtime's `/execute` answer, as it sent it."""

    stdout: str
    stderr: str
    exit_code: int


def health_request() -> HttpRequest:
    return HttpRequest("GET", "/", read_timeout=CONTROL_READ_TIMEOUT, idempotent=True)


def execute_request(command: str, *, read_timeout: float, idempotent: bool) -> HttpRequest:
    # ensure_ascii: a non-UTF-8 file name is a lone surrogate here; as a \udcXX escape
    # the runtime decodes it back to the same str and execs it as the original byte.
    body = json.dumps({"command": command}, ensure_ascii=True).encode("ascii")
    return HttpRequest("POST", "/execute", read_timeout=read_timeout, idempotent=idempotent, json_body=body)


def parse_execute_response(resp: HttpResponse) -> RuntimeExec:
    if resp.status != 200:
        raise MalformedResponse(f"runtime /execute answered HTTP {resp.status}: {resp.content[:200]!r}")
    garbage = f"runtime /execute answered garbage: {resp.content[:200]!r}"
    try:
        data = json.loads(resp.content)
    except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested deeper than the stack
        raise MalformedResponse(garbage) from exc
    if not isinstance(data, dict):
        raise MalformedResponse(garbage)
    stdout, stderr, code = data.get("stdout"), data.get("stderr"), data.get("exit_code")
    if not (isinstance(stdout, str) and isinstance(stderr, str) and type(code) is int):
        raise MalformedResponse(garbage)
    return RuntimeExec(stdout, stderr, code)


def upload_request(relative_name: str, content: bytes) -> HttpRequest:
    # Writes are never retried: a repeated upload is harmless here, but the rule is simple.
    return HttpRequest(
        "POST",
        "/upload",
        read_timeout=TRANSFER_READ_TIMEOUT,
        idempotent=False,
        upload=(relative_name, content),
    )


def upload_error(resp: HttpResponse) -> str | None:
    """None when the runtime stored the upload, else a short error string."""
    if resp.status == 200:
        return None
    return f"staging upload failed: HTTP {resp.status} {resp.content[:120]!r}"


def download_request(relative_name: str) -> HttpRequest:
    quoted = urllib.parse.quote(relative_name, safe="/")
    return HttpRequest("GET", f"/download/{quoted}", read_timeout=TRANSFER_READ_TIMEOUT, idempotent=True)


def health_ok(resp: HttpResponse) -> bool:
    return resp.status == 200
