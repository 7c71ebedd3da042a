"""`PodSandbox`: the deepagents sandbox backend over one pod's python runtime.

A deepagents `BaseSandbox` (nothing in between). This module holds the construction, identity and
`execute`; the file operations are a `sandbox_files.SandboxFiles` it holds and delegates to (their
answers mapped in `file_results`), the activity reports `sandbox_activity.ActivityHooks`, the path
rules `paths.PathPolicy`. Every public method does three things: pure preparation, one call on the
transport (sync or async), and pure interpretation of the answer.

Session hooks (for the AgentSession layer):
- `on_activity(busy_seconds)` is called before each operation (`execute` passes
  its timeout, other operations None). It may raise to refuse the operation.
  The async API awaits `aon_activity(busy_seconds)` instead, or, without one, runs
  `on_activity` in a worker thread: an `a*` method never blocks the event loop.
- `resolve_endpoint()` returns the pod's current endpoint. It is called when a
  connection or a read fails (a command or write only when it provably never
  reached the pod), before the operation after a failed command or write, and
  after `reconnect()` (the caller's signal that the pod changed).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from deepagents.backends.protocol import (
    DeleteResult,
    EditResult,
    ExecuteOffloadResult,
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
    GlobResult,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
)
from deepagents.backends.sandbox import BaseSandbox

from .commands import CommandResult
from .paths import PathPolicy, normalize
from .probe import RuntimeInfo
from .protocol import DEFAULT_COMMAND_TIMEOUT, DEFAULT_MAX_OUTPUT, MAX_COMMAND_TIMEOUT
from .sandbox_activity import ActivityHooks, APending, Pending
from .sandbox_files import SandboxFiles
from .transport import PodEndpoint, ResponseLimits, RetryPolicy, RuntimeTransport


class PodSandbox(BaseSandbox):
    """deepagents sandbox backend talking to one pod's runtime (see the module docstring).

    Args:
        endpoint: where the runtime answers (ignored when `transport` is given).
        sandbox_id: the backend's `id` (e.g. the AgentSession name).
        resolve_endpoint: returns the pod's current endpoint (sync; the async API
            calls it in a worker thread).
        on_activity: called with `busy_seconds` before each operation; it may return a function that waits
            for a report it left running beside the operation (called at the operation's end).
        aon_activity: its async twin for the async API (default: `on_activity` in a
            worker thread); it may return an awaitable of such a report.
        max_output_size: bytes of `execute` output kept (default 1 MiB); more sets
            `truncated=True` and is cut inside the pod.
        command_timeout: default `execute` timeout in seconds (default 300, max 3600),
            enforced inside the pod; a killed command reports exit code 124.
        allow_prefixes: absolute prefixes where write/edit/delete/upload may act;
            elsewhere they fail with `permission_denied`. Reads are not limited.
        virtual_mode, root_dir: caller paths are relative to `root_dir` in the pod;
            `..`, a leading `~`, and symlinks leading out of `root_dir` are
            `invalid_path`. Commands run with `root_dir` as working directory
            (their text is not rewritten).
        working_dir: working directory of `execute` (default: the runtime's base
            directory, or `root_dir` in virtual mode); created when missing.
        enable_capture_offload: let deepagents capture large `execute` output to a
            file in the sandbox instead of returning it (see `BaseSandbox`).
        retry: backoff for idempotent requests.
        response_limits: bounds on every answer of the pod (`ResponseLimits`: size, default 256 MiB,
            and total time, the request's read timeout + 30 s); crossing one raises `ResponseTooLarge`
            or `ResponseTooSlow`.
        transport: a ready `RuntimeTransport` (tests, sharing); overrides `endpoint`.
    """

    def __init__(
        self,
        endpoint: PodEndpoint | None = None,
        *,
        sandbox_id: str,
        resolve_endpoint: Callable[[], PodEndpoint] | None = None,
        on_activity: Callable[[float | None], Pending] | None = None,
        aon_activity: Callable[[float | None], Awaitable[APending]] | None = None,
        max_output_size: int = DEFAULT_MAX_OUTPUT,
        command_timeout: int = DEFAULT_COMMAND_TIMEOUT,
        allow_prefixes: Sequence[str] | None = None,
        virtual_mode: bool = False,
        root_dir: str | None = None,
        working_dir: str | None = None,
        enable_capture_offload: bool = False,
        retry: RetryPolicy | None = None,
        transport: RuntimeTransport | None = None,
        response_limits: ResponseLimits | None = None,
    ) -> None:
        if transport is None:
            if endpoint is None:
                raise ValueError("PodSandbox needs an endpoint or a transport")
            transport = RuntimeTransport(
                endpoint, retry=retry, resolve_endpoint=resolve_endpoint, limits=response_limits
            )
        elif response_limits is not None:
            transport.set_limits(response_limits)
        if max_output_size < 1:
            raise ValueError("max_output_size must be positive")
        self._transport = transport
        self._id = sandbox_id
        self._activity = ActivityHooks(on_activity, aon_activity)
        self._max_output = max_output_size
        self._default_timeout = _check_timeout(command_timeout)
        self._policy = PathPolicy(virtual_mode=virtual_mode, root_dir=root_dir, allow_prefixes=allow_prefixes)
        if working_dir is not None and not working_dir.startswith("/"):
            raise ValueError("working_dir must be absolute")
        self._cwd = working_dir or (self._policy.root_dir if virtual_mode else "")
        self.enable_capture_offload = enable_capture_offload
        self._files = SandboxFiles(self, transport, self._policy, self._cwd, self._activity)

    # -- identity and session hooks --------------------------------------------------

    @property
    def id(self) -> str:
        return self._id

    @property
    def transport(self) -> RuntimeTransport:
        return self._transport

    def reconnect(self) -> None:
        """The caller's signal that the pod may have changed: re-resolve and re-probe next time."""
        self._transport.mark_stale()

    def check_identity(self) -> RuntimeInfo:
        """Probe the runtime now; raises WrongPod when it is not the expected pod."""
        return self._transport.check_identity()

    async def acheck_identity(self) -> RuntimeInfo:
        return await self._transport.acheck_identity()

    def close(self) -> None:
        self._transport.close()

    async def aclose(self) -> None:
        await self._transport.aclose()

    def __enter__(self) -> PodSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- execute ---------------------------------------------------------------------

    def _timeout(self, timeout: int | None) -> int:
        return self._default_timeout if timeout is None else _check_timeout(timeout)

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        """Run `command` with `sh -c` in the pod; output is stdout+stderr in order.

        `timeout` (seconds, 0 = the 3600 s maximum) is enforced inside the pod: the
        command's process group is killed and the result has exit code 124. Never
        re-sent on a transport failure (raises TransportError).
        """
        seconds = self._timeout(timeout)
        with self._activity.operation(float(seconds)):
            result = self._transport.execute(command, timeout=seconds, max_output=self._max_output, cwd=self._cwd)
        return _execute_response(result)

    async def aexecute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        seconds = self._timeout(timeout)
        async with self._activity.aoperation(float(seconds)):
            result = await self._transport.aexecute(
                command, timeout=seconds, max_output=self._max_output, cwd=self._cwd
            )
        return _execute_response(result)

    def execute_with_offload(self, command: str, capture_path: str, **options: Any) -> ExecuteOffloadResult:
        """BaseSandbox's capture wrapper, with a virtual capture path mapped into the pod."""
        return super().execute_with_offload(command, self._capture_path(capture_path), **options)

    async def aexecute_with_offload(self, command: str, capture_path: str, **options: Any) -> ExecuteOffloadResult:
        return await super().aexecute_with_offload(command, self._capture_path(capture_path), **options)

    def _capture_path(self, capture_path: str) -> str:
        if not self._policy.virtual_mode or not capture_path.startswith("/"):
            return capture_path
        return self._policy.to_real(normalize(capture_path))

    # -- the file operations: SandboxFiles' (see there) --------------------------------

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        return self._files.upload_files(files)

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        return await self._files.aupload_files(files)

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        return self._files.download_files(paths)

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        return await self._files.adownload_files(paths)

    def write(self, file_path: str, content: str) -> WriteResult:
        return self._files.write(file_path, content)

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        return await self._files.awrite(file_path, content)

    def edit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> EditResult:
        return self._files.edit(file_path, old_string, new_string, replace_all)

    async def aedit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> EditResult:
        return await self._files.aedit(file_path, old_string, new_string, replace_all)

    def delete(self, file_path: str) -> DeleteResult:
        return self._files.delete(file_path)

    async def adelete(self, file_path: str) -> DeleteResult:
        return await self._files.adelete(file_path)

    def ls(self, path: str) -> LsResult:
        return self._files.ls(path)

    async def als(self, path: str) -> LsResult:
        return await self._files.als(path)

    def grep(
        self, pattern: str, path: str | None = None, glob: str | None = None, *, max_count: int | None = None
    ) -> GrepResult:
        return self._files.grep(pattern, path, glob, max_count=max_count)

    async def agrep(
        self, pattern: str, path: str | None = None, glob: str | None = None, *, max_count: int | None = None
    ) -> GrepResult:
        return await self._files.agrep(pattern, path, glob, max_count=max_count)

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        return self._files.glob(pattern, path)

    async def aglob(self, pattern: str, path: str | None = None) -> GlobResult:
        return await self._files.aglob(pattern, path)

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        return self._files.read(file_path, offset, limit)

    async def aread(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        return await self._files.aread(file_path, offset, limit)


# -- pure helpers ----------------------------------------------------------------------


def _check_timeout(timeout: int) -> int:
    if timeout < 0 or timeout > MAX_COMMAND_TIMEOUT:
        raise ValueError(f"timeout must be between 0 and {MAX_COMMAND_TIMEOUT} seconds, got {timeout}")
    # 0 means "no per-call limit"; the pod still gets the maximum so nothing runs forever.
    return math.ceil(timeout) or MAX_COMMAND_TIMEOUT


def _execute_response(result: CommandResult) -> ExecuteResponse:
    return ExecuteResponse(output=result.output, exit_code=result.exit_code, truncated=result.truncated)


__all__ = ["DEFAULT_COMMAND_TIMEOUT", "DEFAULT_MAX_OUTPUT", "MAX_COMMAND_TIMEOUT", "PodSandbox"]
