"""Identity checks and reconnection against real runtime processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_k8s_client.errors import TransportError, WrongPod
from langchain_k8s_client.pod_sandbox import PodSandbox
from langchain_k8s_client.transport import PodEndpoint, RetryPolicy
from testkit.runtime_harness import RuntimeServer, free_loopback_address, runtime_process

from .conftest import POD_NAME

FAST_RETRY = RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02)


def test_check_identity_reports_the_pod(pod_sandbox: PodSandbox, runtime_server: RuntimeServer) -> None:
    info = pod_sandbox.check_identity()
    assert info.hostname == POD_NAME
    assert info.base_dir == str(runtime_server.base_dir)
    assert info.runner == "timeout"
    assert pod_sandbox.transport.health() is True


def test_wrong_pod_is_refused_before_any_command(runtime_server: RuntimeServer, scratch: Path) -> None:
    marker = scratch / "ran"
    with PodSandbox(runtime_server.endpoint(expected_hostname="another-pod"), sandbox_id="w") as backend:
        with pytest.raises(WrongPod) as info:
            backend.execute(f"touch '{marker}'")
        assert (info.value.expected, info.value.actual) == ("another-pod", POD_NAME)
        with pytest.raises(WrongPod):
            backend.download_files([f"{scratch}/x"])
    assert not marker.exists()


def test_unreachable_pod_raises_transport_error_and_never_resends(scratch: Path) -> None:
    dead = PodEndpoint(f"http://{free_loopback_address()}:8888")
    with PodSandbox(dead, sandbox_id="d", retry=FAST_RETRY) as backend:
        with pytest.raises(TransportError) as info:
            backend.execute("true")
        assert info.value.maybe_delivered is False


def test_resolver_finds_the_pod_after_a_wrong_or_dead_endpoint(runtime_server: RuntimeServer, scratch: Path) -> None:
    log = scratch / "log"
    resolved: list[str] = []

    def resolve() -> PodEndpoint:
        resolved.append("x")
        return runtime_server.endpoint()

    stale = PodEndpoint(f"http://{free_loopback_address()}:8888", expected_hostname=POD_NAME)
    with PodSandbox(stale, sandbox_id="r", resolve_endpoint=resolve, retry=FAST_RETRY) as backend:
        result = backend.execute(f"echo once >> '{log}'")
    assert result.exit_code == 0
    assert log.read_text() == "once\n"  # connecting is retried, the command ran exactly once
    assert resolved == ["x"]


def test_pod_replacement_is_followed_without_running_anything_twice(tmp_path: Path, scratch: Path) -> None:
    (scratch / "f.txt").write_text("data")
    log = scratch / "log"
    current: dict[str, PodEndpoint] = {}
    resolutions: list[str] = []

    def resolve() -> PodEndpoint:
        resolutions.append(current["ep"].base_url)
        return current["ep"]

    with runtime_process(tmp_path / "b", "pod-b") as pod_b:
        with runtime_process(tmp_path / "a", "pod-a") as pod_a:
            current["ep"] = pod_a.endpoint()
            reader = PodSandbox(current["ep"], sandbox_id="s", resolve_endpoint=resolve, retry=FAST_RETRY)
            writer = PodSandbox(current["ep"], sandbox_id="s", resolve_endpoint=resolve, retry=FAST_RETRY)
            assert reader.execute("echo $HOSTNAME").output == "pod-a\n"
            assert writer.execute("echo $HOSTNAME").output == "pod-a\n"
        current["ep"] = pod_b.endpoint()  # pod-a is gone; the session layer knows the new pod

        # A read on the dead pod re-resolves and is retried transparently.
        assert reader.download_files([f"{scratch}/f.txt"])[0].content == b"data"
        assert reader.execute("echo $HOSTNAME").output == "pod-b\n"

        # A command refused at connect time provably never ran: it goes to the new pod, once.
        assert writer.execute(f"echo $HOSTNAME >> '{log}'").exit_code == 0
        assert log.read_text() == "pod-b\n"

        # The caller's signal (e.g. the session was resumed) forces a new resolution.
        before = len(resolutions)
        writer.reconnect()
        assert writer.execute("echo $HOSTNAME").output == "pod-b\n"
        assert len(resolutions) == before + 1
        reader.close()
        writer.close()
