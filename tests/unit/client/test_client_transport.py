"""Transport: request building, retry policy, identity, reconnection (httpx.MockTransport)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable

import httpx
import pytest

from langchain_k8s_client import wire
from langchain_k8s_client.errors import SandboxError, TransportError, WrongPod
from langchain_k8s_client.transport import PodEndpoint, RetryPolicy, RuntimeTransport

from .fakes import BASE, Answer, FakeRuntime, plain, wrapped

ANOTHER = "http://127.0.0.10:8888"


def test_endpoint_validation_and_normalization() -> None:
    endpoint = PodEndpoint("http://10.0.0.1:8888/", headers={"X-Sandbox-ID": "s"})
    assert endpoint.base_url == "http://10.0.0.1:8888"
    for bad in ("10.0.0.1:8888", "ftp://x", "http://"):
        with pytest.raises(ValueError):
            PodEndpoint(bad)


def test_retry_policy_backoff_is_bounded() -> None:
    policy = RetryPolicy(attempts=5, base_delay=0.1, max_delay=0.3)
    delays = [policy.delay(i) for i in range(6)]
    assert all(0 < d <= 0.3 for d in delays)
    assert delays[0] <= 0.1


def test_execute_request_is_ascii_json_even_for_non_utf8_names() -> None:
    request = wire.execute_request("cat '/tmp/\udcff'", read_timeout=5, idempotent=False)
    assert request.json_body is not None
    assert json.loads(request.json_body) == {"command": "cat '/tmp/\udcff'"}
    assert b"\\udcff" in request.json_body


def test_parse_execute_response_rejects_errors() -> None:
    with pytest.raises(SandboxError, match="HTTP 422"):
        wire.parse_execute_response(wire.HttpResponse(422, b"{}"))
    with pytest.raises(SandboxError, match="garbage"):
        wire.parse_execute_response(wire.HttpResponse(200, b"<html>"))


def test_router_headers_and_timeouts_reach_every_request() -> None:
    fake = FakeRuntime(answers=[wrapped(b"hi\n")])
    headers = {"X-Sandbox-ID": "sess-1", "X-Sandbox-Namespace": "team", "X-Sandbox-Port": "8888"}
    transport = fake.transport(endpoint=PodEndpoint(BASE, headers=headers, expected_hostname="pod-0"))
    result = transport.execute("echo hi", timeout=7, max_output=100)
    assert result.output == "hi\n"
    assert all(r.headers[k] == v for r in fake.requests for k, v in headers.items())
    command_request = fake.requests[-1]
    assert command_request.extensions["timeout"]["read"] == 7 + 30.0


def test_probe_checks_identity_before_the_first_command() -> None:
    fake = FakeRuntime(hostname="pod-7")
    transport = fake.transport(endpoint=PodEndpoint(BASE, expected_hostname="pod-0"))
    with pytest.raises(WrongPod) as info:
        transport.execute("rm -rf /important", timeout=5, max_output=10)
    assert (info.value.expected, info.value.actual) == ("pod-0", "pod-7")
    assert fake.argvs() == []  # the command was never sent


def test_without_expected_hostname_any_pod_is_accepted() -> None:
    fake = FakeRuntime(hostname="whatever", answers=[wrapped()])
    transport = fake.transport(endpoint=PodEndpoint(BASE))
    assert transport.execute("true", timeout=5, max_output=10).exit_code == 0
    assert transport.info is not None and transport.info.hostname == "whatever"


def test_idempotent_requests_retry_connection_errors() -> None:
    fake = FakeRuntime(probe_failures=[httpx.ConnectError("refused"), httpx.RemoteProtocolError("reset")])
    transport = fake.transport()
    assert transport.check_identity().hostname == "pod-0"
    assert fake.paths().count("POST /execute") == 3


def test_idempotent_requests_retry_gateway_errors() -> None:
    fake = FakeRuntime(answers=[httpx.Response(503), httpx.Response(502), httpx.Response(200, json={})])
    transport = fake.transport()
    assert transport.health() is True
    assert fake.paths() == ["GET /"] * 3


def test_retries_are_bounded() -> None:
    fake = FakeRuntime(probe_failures=[httpx.ConnectError("refused")] * 10)
    with pytest.raises(TransportError) as info:
        fake.transport().check_identity()
    assert info.value.maybe_delivered is False
    assert len(fake.requests) == 3


def test_read_timeouts_are_not_retried() -> None:
    fake = FakeRuntime(probe_failures=[httpx.ReadTimeout("slow")] * 3)
    with pytest.raises(TransportError):
        fake.transport().check_identity()
    assert len(fake.requests) == 1


@pytest.mark.parametrize(
    ("failure", "maybe_delivered"),
    [
        (httpx.ConnectError("refused"), False),
        (httpx.ReadError("reset"), True),
        (httpx.ReadTimeout("slow"), True),
        (httpx.Response(503), True),
    ],
)
def test_commands_are_never_resent(failure: Exception | httpx.Response, maybe_delivered: bool) -> None:
    fake = FakeRuntime(answers=[failure, wrapped()])
    transport = fake.transport()
    with pytest.raises(TransportError) as info:
        transport.execute("echo once >> log", timeout=5, max_output=10)
    assert info.value.maybe_delivered is maybe_delivered
    assert len(fake.argvs()) == 1
    assert transport.info is None  # the next operation probes again


def test_writes_are_never_resent() -> None:
    fake = FakeRuntime(answers=[httpx.ReadError("reset")])
    with pytest.raises(TransportError):
        fake.transport().upload([("/a", b"x", "")])
    assert fake.paths() == ["POST /execute", "POST /upload"]


def test_failed_reads_resolve_the_endpoint_once_and_retry() -> None:
    answers: list[Answer] = [httpx.ConnectError("gone")] * 3
    fake = FakeRuntime(answers=[*answers, plain("@D inline 1\nYQ==\n")])
    resolved: list[int] = []

    def resolve() -> PodEndpoint:
        resolved.append(1)
        return PodEndpoint(ANOTHER, expected_hostname="pod-0")

    transport = fake.transport(resolve_endpoint=resolve)
    [result] = transport.download([("/f", "")])
    assert result.content == b"a"
    assert resolved == [1]
    assert transport.endpoint.base_url == ANOTHER
    assert str(fake.requests[-1].url).startswith(ANOTHER)


def test_failed_commands_make_the_next_call_resolve_first() -> None:
    fake = FakeRuntime(answers=[httpx.ReadError("reset"), wrapped(b"ok")])
    resolved: list[int] = []

    def resolve() -> PodEndpoint:
        resolved.append(1)
        return PodEndpoint(ANOTHER, expected_hostname="pod-0")

    transport = fake.transport(resolve_endpoint=resolve)
    with pytest.raises(TransportError):
        transport.execute("step 1", timeout=5, max_output=10)
    assert resolved == []  # not re-sent, not even to a new endpoint
    assert transport.execute("step 2", timeout=5, max_output=10).output == "ok"
    assert resolved == [1]
    assert [argv[7] for argv in fake.argvs()] == ["step 1", "step 2"]


def test_wrong_pod_resolves_once_then_gives_up() -> None:
    fake = FakeRuntime(hostname="pod-new")
    endpoints = iter([PodEndpoint(ANOTHER, expected_hostname="pod-new")])
    transport = fake.transport(
        endpoint=PodEndpoint(BASE, expected_hostname="pod-old"), resolve_endpoint=lambda: next(endpoints)
    )
    assert transport.check_identity().hostname == "pod-new"
    assert transport.endpoint.base_url == ANOTHER

    expecting_y = PodEndpoint(BASE, expected_hostname="y")
    stubborn = FakeRuntime(hostname="pod-x").transport(endpoint=expecting_y, resolve_endpoint=lambda: expecting_y)
    with pytest.raises(WrongPod):
        stubborn.check_identity()


def test_mark_stale_resolves_before_the_next_call() -> None:
    fake = FakeRuntime(answers=[wrapped(), wrapped()])
    calls: list[int] = []
    transport = fake.transport(
        resolve_endpoint=lambda: calls.append(1) or PodEndpoint(BASE, expected_hostname="pod-0")  # type: ignore[func-returns-value]
    )
    transport.execute("a", timeout=5, max_output=10)
    transport.mark_stale()
    transport.execute("b", timeout=5, max_output=10)
    assert calls == [1]
    assert fake.paths().count("POST /execute") == 4  # probe, a, probe, b


def test_download_cleans_staging_even_when_a_transfer_fails() -> None:
    fake = FakeRuntime(answers=[plain("@D staged 9 dn-t-1\n@D staged 9 dn-t-2\n"), httpx.Response(500), plain()])
    with pytest.raises(SandboxError, match="HTTP 500"):
        fake.transport().download([("/a", ""), ("/b", "")])
    cleanup = fake.argvs()[-1]
    assert cleanup[:2] == ["rm", "-f"]
    assert [p.rsplit("/", 1)[1] for p in cleanup[2:]] == ["dn-t-1", "dn-t-2"]


def test_download_of_a_vanished_staged_file_is_not_found() -> None:
    fake = FakeRuntime(answers=[plain("@D staged 9 dn-t-1\n"), httpx.Response(404), plain()])
    [result] = fake.transport().download([("/a", "")])
    assert (result.content, result.error) == (None, "file_not_found")


def test_upload_stages_each_file_then_finalizes_once() -> None:
    fake = FakeRuntime(answers=[httpx.Response(200), httpx.Response(500, text="disk full"), plain("@U ok\n")])
    results = fake.transport().upload([("/a b", b"1", ""), ("/c", b"2", "/c")])
    assert results[0] is None
    assert results[1] is not None and "HTTP 500" in results[1]
    upload = fake.requests[1]
    assert b'filename=".lkc-staging/up-' in upload.content
    finalize = fake.argvs()[-1]
    assert finalize[4:] == [finalize[4], "/a b", ""] and finalize[4].startswith("/app/.lkc-staging/up-")


async def test_async_driver_shares_the_logic() -> None:
    fake = FakeRuntime(answers=[httpx.ReadError("reset"), wrapped(b"x", 2)])
    transport = fake.transport()
    with pytest.raises(TransportError):
        await transport.aexecute("a", timeout=5, max_output=10)
    result = await transport.aexecute("b", timeout=5, max_output=10)
    assert (result.output, result.exit_code) == ("x", 2)
    assert (await transport.acheck_identity()).hostname == "pod-0"
    await transport.aclose()


async def test_async_clients_are_per_event_loop() -> None:
    fake = FakeRuntime(answers=[httpx.Response(200, json={})])
    transport = fake.transport()
    assert await transport.ahealth() is True
    assert len(transport._aclients) == 1
    await transport.aclose()
    assert len(transport._aclients) == 0


def test_a_command_that_never_connected_goes_once_to_the_resolved_pod() -> None:
    fake = FakeRuntime(answers=[httpx.ConnectError("refused"), wrapped(b"ran")])
    transport = fake.transport(resolve_endpoint=lambda: PodEndpoint(ANOTHER, expected_hostname="pod-0"))
    assert transport.execute("step", timeout=5, max_output=10).output == "ran"
    assert [argv[7] for argv in fake.argvs()] == ["step", "step"]  # the first never reached a runtime
    assert str(fake.requests[-1].url).startswith(ANOTHER)


def test_a_command_that_may_have_run_is_not_resent_even_with_a_resolver() -> None:
    for failure in (httpx.ReadError("reset"), httpx.ReadTimeout("slow"), httpx.Response(502)):
        fake = FakeRuntime(answers=[failure])
        transport = fake.transport(resolve_endpoint=lambda: PodEndpoint(ANOTHER, expected_hostname="pod-0"))
        with pytest.raises(TransportError):
            transport.execute("step", timeout=5, max_output=10)
        assert len(fake.argvs()) == 1


def test_a_wrapper_is_staged_once_then_each_call_sends_its_name() -> None:
    fake = FakeRuntime(answers=[plain(), plain(), wrapped(b"1"), wrapped(b"2")])
    fake.handler = _without_wrappers(fake)  # type: ignore[method-assign]
    transport = fake.transport()
    assert transport.execute("echo 1", timeout=5, max_output=10).output == "1"
    assert transport.execute("echo 2", timeout=5, max_output=10).output == "2"
    assert fake.paths() == ["POST /execute", "POST /upload", "POST /execute", "POST /execute", "POST /execute"]
    mv, first, second = fake.argvs()
    assert mv[:2] == ["mv", "-f"] and mv[2].startswith(mv[3] + ".") and mv[3].startswith("/app/.lkc-staging/w-")
    assert (
        first[:2] == second[:2] == ["sh", "-c"]
        and first[2] == second[2] == f". ./.lkc-staging/{mv[3].rsplit('/', 1)[1]}"
    )
    assert first[7] == "echo 1" and second[7] == "echo 2"


def test_a_wrapper_removed_since_the_probe_is_staged_again_and_the_call_sent_once_more() -> None:
    missing = plain(stderr="sh: 1: .: cannot open ./.lkc-staging/WRAPPER: No such file", exit_code=2)

    def gone(request: httpx.Request) -> httpx.Response:
        wrapper = shlex.split(FakeRuntime.command(request))[2].rsplit("/", 1)[1]
        return httpx.Response(200, json={**missing, "stderr": str(missing["stderr"]).replace("WRAPPER", wrapper)})

    fake = FakeRuntime(answers=[gone, httpx.Response(200, json={}), plain(), wrapped(b"ok")])
    transport = fake.transport()
    assert transport.execute("echo ok", timeout=5, max_output=10).output == "ok"
    assert fake.paths() == ["POST /execute", "POST /execute", "POST /upload", "POST /execute", "POST /execute"]


def test_a_pod_that_refuses_the_wrapper_gets_the_script_with_each_call() -> None:
    fake = FakeRuntime(answers=[httpx.Response(403, json={"message": "Access denied"}), wrapped(b"1"), wrapped(b"2")])
    fake.handler = _without_wrappers(fake)  # type: ignore[method-assign]
    transport = fake.transport()
    assert transport.execute("echo 1", timeout=5, max_output=10).output == "1"
    assert transport.execute("echo 2", timeout=5, max_output=10).output == "2"
    assert fake.paths() == ["POST /execute", "POST /upload", "POST /execute", "POST /execute"]
    assert all(len(argv[2]) > 300 for argv in fake.argvs())  # the script itself


def _without_wrappers(fake: FakeRuntime) -> Callable[[httpx.Request], httpx.Response]:
    handler = fake.handler

    def probe_without_wrappers(request: httpx.Request) -> httpx.Response:
        response = handler(request)
        if request.url.path == "/execute" and "@LKCP" in fake.command(request):
            body = json.loads(response.content)
            body["stdout"] = body["stdout"].split("wrappers=")[0]
            return httpx.Response(200, json=body)
        return response

    return probe_without_wrappers


async def test_a_callers_own_httpx_client_is_used_when_given() -> None:
    """Without one, requests go straight to the transport (no httpx.Client layer); with one, through it."""
    fake = FakeRuntime(answers=[wrapped(b"sync"), wrapped(b"async")])
    mock = httpx.MockTransport(fake.handler)
    sent: list[str] = []

    def hook(request: httpx.Request) -> None:
        sent.append(request.url.path)

    async def ahook(request: httpx.Request) -> None:
        sent.append(request.url.path)

    transport = RuntimeTransport(
        PodEndpoint(BASE, expected_hostname=fake.hostname),
        client=httpx.Client(transport=mock, event_hooks={"request": [hook]}),
        async_client_factory=lambda: httpx.AsyncClient(transport=mock, event_hooks={"request": [ahook]}),
    )
    assert transport.execute("a", timeout=5, max_output=10).output == "sync"
    assert (await transport.aexecute("b", timeout=5, max_output=10)).output == "async"
    assert sent == ["/execute"] * 3  # the probe, then each API's command
    transport.close()
    await transport.aclose()
