"""The dev cluster's pod runner reports a pod's status until the API server takes it (no cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes.client.rest import ApiException

from devcluster.podrunner import runner
from devcluster.podrunner.runner import PodWorker


class FlakyAPI:
    """patch_namespaced_pod_status fails with the given errors first, then succeeds."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def patch_namespaced_pod_status(self, name: str, namespace: str, body: dict[str, Any], **_: Any) -> None:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)


POD = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
    "spec": {"containers": [{"name": "sandbox", "image": "registry.k8s.io/pause:3.10"}]},
    "status": {"podIP": "127.21.0.9", "phase": "Running"},
}


def worker(api: FlakyAPI, tmp_path: Path) -> PodWorker:
    return PodWorker(api, POD, tmp_path / "pods", tmp_path / "volumes")  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "STATUS_RETRY", (0.001, 0.002), raising=False)


def test_pause_pod_is_reported_ready_after_the_api_server_restarts(tmp_path: Path) -> None:
    """What a restarting API server answers (503 while it shuts down, then refused connections): the
    pause pod's only status write is sent until it lands. Before, the first failure dropped it and the
    pod stayed ContainerCreating for good."""
    refused = urllib3.exceptions.MaxRetryError(None, "/api/v1/pods", reason=ConnectionRefusedError(111))  # type: ignore[arg-type]
    api = FlakyAPI(ApiException(status=503, reason="Service Unavailable"), refused, refused)
    w = worker(api, tmp_path)
    w._run_inner()
    assert api.calls == 4 and w.ready is True


def test_a_refusal_or_a_gone_pod_is_not_retried(tmp_path: Path) -> None:
    for status in (404, 422):
        api = FlakyAPI(ApiException(status=status, reason="no"))
        w = worker(api, tmp_path)
        w._run_inner()
        assert api.calls == 1 and w.ready is None


def test_a_stopped_worker_stops_retrying(tmp_path: Path) -> None:
    api = FlakyAPI(*[ApiException(status=503, reason="Service Unavailable")] * 1000)

    class StopAfterTwo(FlakyAPI):
        def patch_namespaced_pod_status(self, *args: Any, **kwargs: Any) -> None:
            if self.calls == 2:
                w.stop_event.set()
            super().patch_namespaced_pod_status(*args, **kwargs)

    stopping = StopAfterTwo(*api.errors)
    w = worker(stopping, tmp_path)
    w._run_inner()
    assert stopping.calls == 3 and w.ready is None


def test_a_pod_whose_setup_failed_is_tried_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Preparing a runtime pod reads the API (ConfigMaps, Secrets, PVCs): a read refused while the API
    server restarts marked the pod CreateContainerError for good. Now it is reported and tried again after
    a kubelet's back-off."""
    monkeypatch.setattr(runner, "RESTART_BACKOFF", (0.001,))
    api = FlakyAPI()
    w = worker(api, tmp_path)
    attempts: list[int] = []

    def run_inner() -> None:
        attempts.append(1)
        if len(attempts) < 3:
            raise urllib3.exceptions.MaxRetryError(None, "/api/v1/namespaces/ns/configmaps/c", reason=None)  # type: ignore[arg-type]
        w.ready = True

    monkeypatch.setattr(w, "_run_inner", run_inner)
    w._run()
    assert len(attempts) == 3 and api.calls == 2 and w.ready is True  # two CreateContainerError reports
