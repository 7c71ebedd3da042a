"""langchain-tests' standard sandbox suite against `PodSandbox` on the real runtime.

Seven standard tests predate deepagents 0.7 and contradict its contract; they are
marked xfail(strict=True) so they keep proving that the backend follows 0.7:
`write` overwrites, and `glob` returns absolute paths of files only.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator

import pytest
from deepagents.backends.protocol import SandboxBackendProtocol

from langchain_k8s_client.pod_sandbox import PodSandbox
from testkit.runtime_harness import RuntimeServer
from tests.conformance import Deepagents07SandboxTests

# The runtime sees the host filesystem: give the suite its own root instead of /tmp/test_sandbox_ops/.
_SUITE_ROOT = f"{tempfile.gettempdir()}/lkc-conformance-{uuid.uuid4().hex[:12]}/"


class TestPodSandboxConformance(Deepagents07SandboxTests):
    @property
    def sandbox_root_dir(self) -> str:
        return _SUITE_ROOT

    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, runtime_server: RuntimeServer) -> Iterator[SandboxBackendProtocol]:
        backend = PodSandbox(runtime_server.endpoint(), sandbox_id="conformance")
        try:
            yield backend
        finally:
            backend.close()
            shutil.rmtree(_SUITE_ROOT, ignore_errors=True)
