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
from typing import Literal

from .errors import MalformedResponse
from .protocol import (
    CONTROL_READ_TIMEOUT,
    DOWNLOAD_PATH,
    EXECUTE_COMMAND,
    EXECUTE_EXIT_CODE,
    EXECUTE_PATH,
    EXECUTE_STDERR,
    EXECUTE_STDOUT,
    HEALTH_PATH,
    STATUS_OK,
    TRANSFER_READ_TIMEOUT,
    UPLOAD_PATH,
)


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
    return HttpRequest("GET", HEALTH_PATH, read_timeout=CONTROL_READ_TIMEOUT, idempotent=True)


def execute_request(command: str, *, read_timeout: float, idempotent: bool) -> HttpRequest:
    # ensure_ascii: a non-UTF-8 file name is a lone surrogate here; as a \udcXX escape
    # the runtime decodes it back to the same str and execs it as the original byte.
    body = json.dumps({EXECUTE_COMMAND: command}, ensure_ascii=True).encode("ascii")
    return HttpRequest("POST", EXECUTE_PATH, read_timeout=read_timeout, idempotent=idempotent, json_body=body)


def parse_execute_response(resp: HttpResponse) -> RuntimeExec:
    if resp.status != STATUS_OK:
        raise MalformedResponse(f"runtime {EXECUTE_PATH} answered HTTP {resp.status}: {resp.content[:200]!r}")
    garbage = f"runtime {EXECUTE_PATH} answered garbage: {resp.content[:200]!r}"
    try:
        data = json.loads(resp.content)
    except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested deeper than the stack
        raise MalformedResponse(garbage) from exc
    if not isinstance(data, dict):
        raise MalformedResponse(garbage)
    stdout, stderr, code = data.get(EXECUTE_STDOUT), data.get(EXECUTE_STDERR), data.get(EXECUTE_EXIT_CODE)
    if not (isinstance(stdout, str) and isinstance(stderr, str) and type(code) is int):
        raise MalformedResponse(garbage)
    return RuntimeExec(stdout, stderr, code)


def upload_request(relative_name: str, content: bytes) -> HttpRequest:
    # Writes are never retried: a repeated upload is harmless here, but the rule is simple.
    return HttpRequest(
        "POST",
        UPLOAD_PATH,
        read_timeout=TRANSFER_READ_TIMEOUT,
        idempotent=False,
        upload=(relative_name, content),
    )


def upload_error(resp: HttpResponse) -> str | None:
    """None when the runtime stored the upload, else a short error string."""
    if resp.status == STATUS_OK:
        return None
    return f"staging upload failed: HTTP {resp.status} {resp.content[:120]!r}"


def download_request(relative_name: str) -> HttpRequest:
    quoted = urllib.parse.quote(relative_name, safe="/")
    return HttpRequest("GET", f"{DOWNLOAD_PATH}{quoted}", read_timeout=TRANSFER_READ_TIMEOUT, idempotent=True)


def health_ok(resp: HttpResponse) -> bool:
    return resp.status == STATUS_OK
