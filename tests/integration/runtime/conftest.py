"""Fixtures: one real runtime process for the session, a scratch directory per test."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from langchain_k8s_client.pod_sandbox import PodSandbox
from testkit.runtime_harness import RuntimeServer, runtime_missing, runtime_process

POD_NAME = "session-pod-0"


@pytest.fixture(scope="session")
def runtime_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeServer]:
    # Every runtime test takes this fixture or runtime_process (a conftest's pytestmark marks nothing).
    missing = runtime_missing()
    if missing:
        pytest.skip(missing)
    with runtime_process(tmp_path_factory.mktemp("runtime"), POD_NAME) as server:
        yield server


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A per-test directory: the runtime sees the host filesystem, so tests write only here."""
    directory = tmp_path / f"w-{uuid.uuid4().hex[:8]}"
    directory.mkdir()
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def pod_sandbox(runtime_server: RuntimeServer) -> Iterator[PodSandbox]:
    backend = PodSandbox(runtime_server.endpoint(), sandbox_id="it")
    yield backend
    backend.close()
