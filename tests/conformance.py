"""The standard suite's tests that contradict the deepagents 0.7 contract, marked once for every backend.

langchain-tests 1.1.9 predates deepagents 0.7: `write` now creates or overwrites, and `glob` returns
absolute paths of regular files only. These seven really fail for a backend that follows 0.7, so they
are strict xfails that accept only an AssertionError: they start failing loudly the day the suite or the
contract changes, or the backend fails them for another reason.
"""

from __future__ import annotations

import pytest
from deepagents.backends.protocol import SandboxBackendProtocol
from langchain_tests.integration_tests import SandboxIntegrationTests

_OVERWRITES = "deepagents 0.7 write() creates or overwrites; langchain-tests 1.1.9 expects 'already exists'"
_ABSOLUTE = "deepagents 0.7 glob() returns absolute paths; langchain-tests 1.1.9 expects relative ones"
_FILES_ONLY = "deepagents 0.7 glob() returns regular files only; langchain-tests 1.1.9 expects directories too"


class Deepagents07SandboxTests(SandboxIntegrationTests):
    @pytest.mark.xfail(strict=True, raises=AssertionError, reason=_OVERWRITES)
    def test_write_existing_file_fails(self, sandbox_backend: SandboxBackendProtocol, sandbox_test_root: str) -> None:
        super().test_write_existing_file_fails(sandbox_backend, sandbox_test_root)

    @pytest.mark.xfail(strict=True, raises=AssertionError, reason=_ABSOLUTE)
    def test_glob(self, sandbox_backend: SandboxBackendProtocol, sandbox_test_root: str) -> None:
        super().test_glob(sandbox_backend, sandbox_test_root)

    @pytest.mark.xfail(strict=True, raises=AssertionError, reason=_ABSOLUTE)
    def test_glob_basic_pattern(self, sandbox_backend: SandboxBackendProtocol, sandbox_test_root: str) -> None:
        super().test_glob_basic_pattern(sandbox_backend, sandbox_test_root)

    @pytest.mark.xfail(strict=True, raises=AssertionError, reason=_ABSOLUTE)
    def test_glob_with_character_class(self, sandbox_backend: SandboxBackendProtocol, sandbox_test_root: str) -> None:
        super().test_glob_with_character_class(sandbox_backend, sandbox_test_root)

    @pytest.mark.xfail(strict=True, raises=AssertionError, reason=_ABSOLUTE)
    def test_glob_with_question_mark(self, sandbox_backend: SandboxBackendProtocol, sandbox_test_root: str) -> None:
        super().test_glob_with_question_mark(sandbox_backend, sandbox_test_root)

    @pytest.mark.xfail(strict=True, raises=AssertionError, reason=_ABSOLUTE)
    def test_glob_hidden_files_explicitly(
        self, sandbox_backend: SandboxBackendProtocol, sandbox_test_root: str
    ) -> None:
        super().test_glob_hidden_files_explicitly(sandbox_backend, sandbox_test_root)

    @pytest.mark.xfail(strict=True, raises=AssertionError, reason=_FILES_ONLY)
    def test_glob_with_directories(self, sandbox_backend: SandboxBackendProtocol, sandbox_test_root: str) -> None:
        super().test_glob_with_directories(sandbox_backend, sandbox_test_root)
