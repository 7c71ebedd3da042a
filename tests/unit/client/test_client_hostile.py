"""The client against a hostile pod (issue 11, item 13): every answer is bounded in size and total time,
and every malformed answer becomes a typed error (`SandboxError`), never a RecursionError, IndexError,
binascii.Error, UnicodeDecodeError or KeyError. The parsers are fuzzed with hypothesis."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langchain_k8s_client import commands, gnu_grep, probe, pyscripts, wire
from langchain_k8s_client.errors import (
    MalformedResponse,
    ResponseLimitExceeded,
    ResponseTooLarge,
    ResponseTooSlow,
    SandboxError,
)
from langchain_k8s_client.file_results import edit_result
from langchain_k8s_client.pod_sandbox import PodSandbox
from langchain_k8s_client.transport import DEFAULT_MAX_RESPONSE_BYTES, ResponseLimits
from langchain_k8s_client.wire import HttpResponse, RuntimeExec

from .fakes import FakeRuntime, plain

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def typed_only(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Run a parser on hostile input: a result or a SandboxError are both fine, nothing else is."""
    with contextlib.suppress(SandboxError):
        fn(*args, **kwargs)


# ------------------------------------------------------------------------ size and time bounds


def test_default_limits_are_sensible() -> None:
    limits = ResponseLimits()
    assert limits.max_bytes == DEFAULT_MAX_RESPONSE_BYTES == 256 * 1024 * 1024
    assert limits.slack_seconds == 30.0
    with pytest.raises(ValueError):
        ResponseLimits(max_bytes=0)
    with pytest.raises(ValueError):
        ResponseLimits(slack_seconds=-1)


def _big_body(size: int, *, chunked: bool) -> httpx.Response:
    if not chunked:
        return httpx.Response(200, content=b"x" * size)

    def chunks() -> Iterator[bytes]:
        for _ in range(size // 65536 + 1):
            yield b"x" * 65536

    return httpx.Response(200, content=chunks())


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_response_over_max_bytes_is_refused_and_the_transport_stays_usable(chunked: bool) -> None:
    fake = FakeRuntime(answers=[_big_body(3 * 1024 * 1024, chunked=chunked), plain("fine")])
    transport = fake.transport(limits=ResponseLimits(max_bytes=1024 * 1024))
    with pytest.raises(ResponseTooLarge) as caught:
        transport.script("true", idempotent=False)
    error = caught.value
    assert isinstance(error, ResponseLimitExceeded) and isinstance(error, SandboxError)
    assert error.limit == "max_bytes" and error.value == 1024 * 1024
    assert "1048576 bytes" in str(error) and "ResponseLimits(max_bytes=" in str(error) and "/execute" in str(error)
    assert transport.script("true", idempotent=False).stdout == "fine"


def test_compression_bomb_is_refused_unread() -> None:
    # No decoder runs on a pod's bytes (issue 28 item 4; tests/unit/client/test_client_response_bounds.py).
    bomb = gzip.compress(b"\0" * (8 * 1024 * 1024))  # ~8 KiB on the wire
    assert len(bomb) < 64 * 1024
    answer = httpx.Response(200, content=bomb, headers={"Content-Encoding": "gzip"})
    fake = FakeRuntime(answers=[answer])
    transport = fake.transport(limits=ResponseLimits(max_bytes=1024 * 1024))
    with pytest.raises(MalformedResponse, match="Content-Encoding 'gzip'"):
        transport.script("true", idempotent=False)


def test_async_response_over_max_bytes_is_refused() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(64):
            yield b"x" * 65536

    fake = FakeRuntime(answers=[httpx.Response(200, content=chunks())])
    transport = fake.transport(limits=ResponseLimits(max_bytes=1024 * 1024))
    with pytest.raises(ResponseTooLarge):
        asyncio.run(transport.ascript("true", idempotent=False))


def test_idempotent_request_over_the_cap_is_not_retried() -> None:
    fake = FakeRuntime(answers=[_big_body(2 * 1024 * 1024, chunked=False), plain("not reached")])
    transport = fake.transport(limits=ResponseLimits(max_bytes=1024 * 1024))
    with pytest.raises(ResponseTooLarge):
        transport.script("true", idempotent=True)
    assert len(fake.answers) == 1  # the second answer was never asked for


def test_trickling_response_hits_the_total_deadline() -> None:
    def trickle() -> Iterator[bytes]:
        for _ in range(150):  # 3 s: long past the deadline, and the test ends even without one
            time.sleep(0.02)
            yield b" "

    fake = FakeRuntime(answers=[httpx.Response(200, content=trickle()), plain("fine")])
    transport = fake.transport(limits=ResponseLimits(slack_seconds=0.2))
    started = time.monotonic()
    with pytest.raises(ResponseTooSlow) as caught:
        transport.script("true", idempotent=True, read_timeout=0.3)
    assert time.monotonic() - started < 1.5
    assert caught.value.limit == "slack_seconds"
    assert "0.5 s" in str(caught.value) and "ResponseLimits(slack_seconds=" in str(caught.value)
    assert transport.script("true", idempotent=False).stdout == "fine"


def test_async_trickling_response_hits_the_total_deadline() -> None:
    async def trickle() -> AsyncIterator[bytes]:
        for _ in range(150):
            await asyncio.sleep(0.02)
            yield b" "

    fake = FakeRuntime(answers=[httpx.Response(200, content=trickle())])
    transport = fake.transport(limits=ResponseLimits(slack_seconds=0.2))
    started = time.monotonic()
    with pytest.raises(ResponseTooSlow):
        asyncio.run(transport.ascript("true", idempotent=True, read_timeout=0.3))
    assert time.monotonic() - started < 1.5


def test_pod_sandbox_passes_its_limits_to_the_transport() -> None:
    from langchain_k8s_client.transport import PodEndpoint

    limits = ResponseLimits(max_bytes=4096, slack_seconds=1.0)
    sandbox = PodSandbox(PodEndpoint("http://127.0.0.9:8888"), sandbox_id="s", response_limits=limits)
    assert sandbox.transport.limits == limits
    sandbox.close()


def test_execute_answer_over_the_cap_through_the_backend() -> None:
    fake = FakeRuntime(answers=[_big_body(2 * 1024 * 1024, chunked=True)])
    sandbox = fake.sandbox(response_limits=ResponseLimits(max_bytes=1024 * 1024))
    with pytest.raises(ResponseTooLarge):
        sandbox.execute("yes")


# ------------------------------------------------------------------ known malformed answers


@pytest.mark.parametrize(
    "content",
    [
        b"[" * 100_000,
        b'{"stdout": ' + b"[" * 50_000 + b"]" * 50_000 + b', "stderr": "", "exit_code": 0}',
        b'{"stdout": "a", "stderr": "", "exit_code": 1e400}',
        b'{"stdout": "a", "stderr": "", "exit_code": "zero"}',
        b'{"stdout": "a", "stderr": "", "exit_code": [0]}',
        b'{"stdout": ["a"], "stderr": "", "exit_code": 0}',
        b'{"stdout": "a", "stderr": null, "exit_code": 0}',
        b'{"stdout": "a", "stderr": ""}',
        b"[1, 2]",
        b"\xff\xfe\x00",
        b'"just a string"',
        b"",
    ],
)
def test_execute_answer_garbage_is_malformed_response(content: bytes) -> None:
    with pytest.raises(MalformedResponse):
        wire.parse_execute_response(HttpResponse(200, content))


def test_execute_answer_http_error_is_malformed_response() -> None:
    with pytest.raises(MalformedResponse):
        wire.parse_execute_response(HttpResponse(500, b"Internal Server Error"))


@pytest.mark.parametrize(
    "stdout",
    [
        "@D staged\n",  # no name: IndexError before
        "@D inline 3\n!!!\n",  # not base64: binascii.Error before
        "@D inline 3\nQQ\n",  # bad padding
        "@D inline 3\n\u00e9\u00e9\u00e9\u00e9\n",  # not ASCII
        "@D staged 3 ../../etc/passwd\n",  # a staged name that climbs out of the staging directory
        "@D staged 3 a/b\n",
        "@D staged 3 ..\n",
    ],
)
def test_download_prepare_garbage_is_malformed_response(stdout: str) -> None:
    with pytest.raises(MalformedResponse):
        commands.parse_download_prepare(stdout, 1)


@pytest.mark.parametrize("stdout", ["@E\u00b2\n", "/a\0\u00b2:x\n", "/a\0" + "9" * 5000 + ":x\n", "@E" + "9" * 5000])
def test_gnu_grep_odd_digits_do_not_escape(stdout: str) -> None:
    typed_only(gnu_grep.parse_gnu_grep, stdout)


@pytest.mark.parametrize(
    "line",
    [
        '{"d": true}',  # no name
        '{"n": "a", "s": "big"}',
        '{"n": "a", "s": 1e400}',
        '{"n": "a", "m": 1e300}',
        '{"n": "a", "m": "yesterday"}',
        '{"n": "a", "m": [1]}',
        '{"n": {"x": 1}}',
    ],
)
def test_ls_record_garbage_is_malformed_response(line: str) -> None:
    answer = pyscripts.parse_json_lines(line + '\n{"done": 1}\n')
    with pytest.raises(MalformedResponse):
        pyscripts.ls_entries(answer)


def test_json_lines_nested_too_deep_are_garbage() -> None:
    answer = pyscripts.parse_json_lines("[" * 100_000 + "\n" + '{"done": 1}')
    assert answer.done == {"done": 1} and len(answer.garbage) == 1


@pytest.mark.parametrize(
    "record", ['{"p": "/a", "l": "one", "t": "x"}', '{"p": "/a", "t": "x"}', '{"p": "/a", "l": 1e400, "t": "x"}']
)
def test_grep_record_garbage_is_malformed_response(record: str) -> None:
    fake = FakeRuntime(answers=[plain(record + '\n{"done": 1, "trunc": 0}\n')])
    sandbox = fake.sandbox()
    with pytest.raises(MalformedResponse):
        sandbox.grep("x", "/a")


@pytest.mark.parametrize("stdout", ["[1]", "5", '{"error": 1, "count": []}', '{"count": "many"}', '"s"', "null"])
def test_edit_answer_garbage_is_an_error_result(stdout: str) -> None:
    result = edit_result(RuntimeExec(stdout, "", 0), "/f", "old")
    assert result.error is not None


def test_probe_garbage_is_malformed_response() -> None:
    with pytest.raises(MalformedResponse):
        probe.parse_probe("@LKCP\nbase=relative\n")
    with pytest.raises(MalformedResponse):
        probe.parse_probe("hello")


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ("/w/" + "a" * 255, False),
        ("/w/" + "a" * 256, True),
        ("/w/" + "\udce9" * 256, True),  # 256 bytes as the pod stores them
        ("/w/" + "\u00e9" * 128, True),  # 256 bytes in UTF-8
        ("/" + "/".join(["a" * 200] * 20), False),  # 4,020 bytes
        ("/" + "/".join(["a" * 200] * 21), True),  # 4,220 bytes: over PATH_MAX
    ],
)
def test_names_too_long_for_the_kernel_are_invalid_path_before_sending(path: str, refused: bool) -> None:
    from langchain_k8s_client.paths import PathPolicy, PathRefused

    for policy in (PathPolicy(), PathPolicy(virtual_mode=True, root_dir="/r")):
        if refused:
            with pytest.raises(PathRefused) as caught:
                policy.resolve(path, write=True)
            assert caught.value.code == "invalid_path"
        else:
            policy.resolve(path)


# ---------------------------------------------------------------------------- hypothesis

MARKERS = [
    "@LKC",
    "@LKC 0 1 2",
    "@LKC! cwd",
    "@LKCP",
    "base=/app",
    "host=pod-0",
    "runner=timeout",
    "group=1",
    "limit=",
    "@D inline",
    "@D inline 3",
    "@D staged",
    "@D staged 3 x",
    "@D! x",
    "@D file_not_found",
    "@U ok",
    "@U",
    "@E",
    "@E1",
    "@X ok",
    "@C ok",
    "/a\0001:x",
    "/a\0",
    "QUJD",
    "=",
]
protocol_text = st.lists(st.one_of(st.sampled_from(MARKERS), st.text(max_size=40)), max_size=12).map("\n".join)
hostile_text = st.one_of(st.text(), protocol_text)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)
record_keys = st.sampled_from(["n", "d", "s", "m", "p", "l", "t", "error", "done", "trunc", "count", "detail"])
json_records = st.dictionaries(record_keys, json_values, max_size=6).map(json.dumps)
json_lines = st.lists(st.one_of(json_records, st.text(max_size=30)), max_size=8).map("\n".join)


@FUZZ
@given(st.binary())
def test_fuzz_execute_answer_bytes(content: bytes) -> None:
    typed_only(wire.parse_execute_response, HttpResponse(200, content))


@FUZZ
@given(st.dictionaries(st.sampled_from(["stdout", "stderr", "exit_code"]), json_values))
def test_fuzz_execute_answer_shapes(data: dict[str, Any]) -> None:
    typed_only(wire.parse_execute_response, HttpResponse(200, json.dumps(data).encode()))


@FUZZ
@given(hostile_text)
def test_fuzz_probe(stdout: str) -> None:
    typed_only(probe.parse_probe, stdout)


@FUZZ
@given(hostile_text, st.text(max_size=50), st.integers(), st.sampled_from(["timeout", "python3", "none"]))
def test_fuzz_user_command(stdout: str, stderr: str, code: int, runner: probe.Runner) -> None:
    typed_only(commands.parse_user_command, stdout, stderr, code, timeout=5, max_output=100, runner=runner)


@FUZZ
@given(hostile_text, st.integers(min_value=0, max_value=4))
def test_fuzz_upload_and_download_answers(stdout: str, count: int) -> None:
    typed_only(commands.parse_upload_finalize, stdout, count)
    typed_only(commands.parse_download_prepare, stdout, count)


@FUZZ
@given(hostile_text)
def test_fuzz_markers_and_grep(stdout: str) -> None:
    typed_only(commands.parse_marker, stdout, "@X")
    typed_only(gnu_grep.parse_gnu_grep, stdout)


@FUZZ
@given(st.one_of(json_lines, st.text()))
def test_fuzz_json_line_answers(stdout: str) -> None:
    typed_only(lambda: pyscripts.ls_entries(pyscripts.parse_json_lines(stdout)))
    typed_only(edit_result, RuntimeExec(stdout, "", 0), "/f", "old")


def _answers(stdout: str, raw: bytes) -> list[Any]:
    """Every request after the probe gets the same hostile answer: as runtime JSON, or raw bytes."""
    return [plain(stdout)] * 8 + [lambda request: httpx.Response(200, content=raw)] * 8


@FUZZ
@given(st.one_of(hostile_text, json_lines), st.binary(max_size=200), st.integers(min_value=0, max_value=1))
def test_fuzz_every_backend_operation(stdout: str, raw: bytes, use_raw: int) -> None:
    """The whole backend, sync and async, against a pod that answers garbage to everything."""
    answers = _answers(stdout, raw)
    if use_raw:
        answers = answers[8:] + answers[:8]
    operations: list[Callable[[PodSandbox], Any]] = [
        lambda s: s.execute("ls"),
        lambda s: s.ls("/app"),
        lambda s: s.grep("x", "/app"),
        lambda s: s.edit("/app/f", "a", "b"),
        lambda s: s.download_files(["/app/f", "/app/g"]),
        lambda s: s.upload_files([("/app/f", b"x")]),
        lambda s: s.delete("/app/f"),
        lambda s: s.read("/app/f"),
        lambda s: s.glob("*.py", "/app"),
        lambda s: s.write("/app/f", "x"),
    ]
    for operation in operations:
        typed_only(operation, FakeRuntime(answers=list(answers)).sandbox())
    async_operations: list[Callable[[PodSandbox], Awaitable[Any]]] = [
        lambda s: s.aexecute("ls"),
        lambda s: s.als("/app"),
        lambda s: s.agrep("x", "/app"),
        lambda s: s.adownload_files(["/app/f"]),
    ]
    for aoperation in async_operations:
        sandbox = FakeRuntime(answers=list(answers)).sandbox()
        typed_only(asyncio.run, aoperation(sandbox))


@FUZZ
@given(st.one_of(hostile_text, st.text()))
def test_fuzz_probe_through_the_transport(stdout: str) -> None:
    """The probe itself answered with garbage: a typed error (or a WrongPod), nothing else."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=plain(stdout))

    fake = FakeRuntime()
    transport = fake.transport()
    transport._http = httpx.MockTransport(handler)
    typed_only(transport.runtime_info)
