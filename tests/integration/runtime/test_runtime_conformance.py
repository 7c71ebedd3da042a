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
from langchain_tests.integration_tests import SandboxIntegrationTests

from langchain_k8s_client.pod_sandbox import PodSandbox

from .harness import RuntimeServer

# The runtime sees the host filesystem: give the suite its own root instead of /tmp/test_sandbox_ops/.
_SUITE_ROOT = f"{tempfile.gettempdir()}/lkc-conformance-{uuid.uuid4().hex[:12]}/"

_OVERWRITES = "deepagents 0.7 write() creates or overwrites; langchain-tests 1.1.9 expects 'already exists'"
_ABSOLUTE = "deepagents 0.7 glob() returns absolute paths; langchain-tests 1.1.9 expects relative ones"
_FILES_ONLY = "deepagents 0.7 glob() returns regular files only; langchain-tests 1.1.9 expects directories too"


class TestPodSandboxConformance(SandboxIntegrationTests):
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

    @pytest.mark.xfail(strict=True, reason=_OVERWRITES)
    def test_write_existing_file_fails(self, sandbox_backend: SandboxBackendProtocol, sandbox_test_root: str) -> None:
        super().test_write_existing_file_fails(sandbox_backend, sandbox_test_root)

    @pytest.mark.xfail(strict=True, reason=_ABSOLUTE)
    def test_glob(self, sandbox_backend: SandboxBackendProtocol, sandbox_test_root: str) -> None:
        super().test_glob(sandbox_backend, sandbox_test_root)

    @pytest.mark.xfail(strict=True, reason=_ABSOLUTE)
    def test_glob_basic_pattern(self, sandbox_backend: SandboxBackendProtocol, sandbox_test_root: str) -> None:
        super().test_glob_basic_pattern(sandbox_backend, sandbox_test_root)

    @pytest.mark.xfail(strict=True, reason=_ABSOLUTE)
    def test_glob_with_character_class(
        self, sandbox_backend: SandboxBackendProtocol, sandbox_test_root: str
    ) -> None:
        super().test_glob_with_character_class(sandbox_backend, sandbox_test_root)

    @pytest.mark.xfail(strict=True, reason=_ABSOLUTE)
    def test_glob_with_question_mark(self, sandbox_backend: SandboxBackendProtocol, sandbox_test_root: str) -> None:
        super().test_glob_with_question_mark(sandbox_backend, sandbox_test_root)

    @pytest.mark.xfail(strict=True, reason=_ABSOLUTE)
    def test_glob_hidden_files_explicitly(
        self, sandbox_backend: SandboxBackendProtocol, sandbox_test_root: str
    ) -> None:
        super().test_glob_hidden_files_explicitly(sandbox_backend, sandbox_test_root)

    @pytest.mark.xfail(strict=True, reason=_FILES_ONLY)
    def test_glob_with_directories(self, sandbox_backend: SandboxBackendProtocol, sandbox_test_root: str) -> None:
        super().test_glob_with_directories(sandbox_backend, sandbox_test_root)
