"""`PodSandbox`: the deepagents sandbox backend over one pod's python runtime.

Every public method does three things: pure preparation (path rules from
`paths`, a command from `commands`/`pyscripts`), one call on the transport (sync
or async), and pure interpretation of the answer. The sync and async twins share
the preparation and interpretation helpers; where an operation takes more than one
step (grep, glob, read) the steps are one flow (`flows`) that both APIs run.

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

import asyncio
import contextvars
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Final

from deepagents.backends.protocol import (
    DeleteResult,
    EditResult,
    ExecuteOffloadResult,
    ExecuteResponse,
    FileDownloadResponse,
    FileInfo,
    FileUploadResponse,
    GlobResult,
    GrepMatch,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
)
from deepagents.backends.sandbox import BaseSandbox
from deepagents.backends.utils import EMPTY_OLD_STRING_ERROR

from . import commands, pyscripts
from .commands import CommandResult, RuntimeInfo
from .flows import Call, Flow, run_async, run_sync
from .paths import PathPolicy, PathRefused, ResolvedPath, normalize
from .runtime import Downloaded
from .transport import PodEndpoint, ResponseLimits, RetryPolicy, RuntimeTransport
from .wire import RuntimeExec

DEFAULT_COMMAND_TIMEOUT: Final = 300
MAX_COMMAND_TIMEOUT: Final = 3600
DEFAULT_MAX_OUTPUT: Final = 1024 * 1024
"""Default cap of `execute` output (bytes of combined stdout+stderr kept, the rest is cut in the pod)."""

_GREP_READ_TIMEOUT: Final = pyscripts.GREP_TIME_BUDGET + 30.0

# deepagents' read/glob scripts encode the path as UTF-8; other operations take any bytes.
_NOT_UTF8: Final = "invalid_path (the name is not UTF-8: use download_files, ls or grep)"

_in_operation: contextvars.ContextVar[bool] = contextvars.ContextVar("lkc_in_operation", default=False)


@dataclass(frozen=True)
class _UploadPlan:
    """Which uploads go to the pod, and the refusals decided locally."""

    paths: list[str]
    items: list[tuple[str, bytes, str]]
    positions: list[int]
    refused: dict[int, PathRefused]

    def finish(self, codes: Sequence[str | None]) -> list[FileUploadResponse]:
        errors: list[str | None] = [None] * len(self.paths)
        for index, refusal in self.refused.items():
            errors[index] = refusal.code
        for index, code in zip(self.positions, codes, strict=True):
            errors[index] = code
        return [FileUploadResponse(path=p, error=e) for p, e in zip(self.paths, errors, strict=True)]


@dataclass(frozen=True)
class _DownloadPlan:
    paths: list[str]
    items: list[tuple[str, str]]
    positions: list[int]
    refused: dict[int, PathRefused]

    def finish(self, results: Sequence[Downloaded]) -> list[FileDownloadResponse]:
        out = [FileDownloadResponse(path=p) for p in self.paths]
        for index, refusal in self.refused.items():
            out[index].error = refusal.code
        for index, result in zip(self.positions, results, strict=True):
            out[index].content, out[index].error = result.content, result.error
        return out


class PodSandbox(BaseSandbox):
    """deepagents sandbox backend talking to one pod's runtime (see the module docstring).

    Args:
        endpoint: where the runtime answers (ignored when `transport` is given).
        sandbox_id: the backend's `id` (e.g. the AgentSession name).
        resolve_endpoint: returns the pod's current endpoint (sync; the async API
            calls it in a worker thread).
        on_activity: called with `busy_seconds` before each operation.
        aon_activity: its async twin for the async API (default: `on_activity` in a
            worker thread).
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
        on_activity: Callable[[float | None], None] | None = None,
        aon_activity: Callable[[float | None], Awaitable[None]] | None = None,
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
        self._on_activity = on_activity
        self._aon_activity = aon_activity
        self._max_output = max_output_size
        self._default_timeout = _check_timeout(command_timeout)
        self._policy = PathPolicy(virtual_mode=virtual_mode, root_dir=root_dir, allow_prefixes=allow_prefixes)
        if working_dir is not None and not working_dir.startswith("/"):
            raise ValueError("working_dir must be absolute")
        self._cwd = working_dir or (self._policy.root_dir if virtual_mode else "")
        self.enable_capture_offload = enable_capture_offload

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

    @contextmanager
    def _operation(self, busy_seconds: float | None) -> Iterator[None]:
        # One activity report per public call: BaseSandbox's read/glob call
        # execute() internally, which must not report again.
        if _in_operation.get():
            yield
            return
        if self._on_activity is not None:
            self._on_activity(busy_seconds)
        token = _in_operation.set(True)
        try:
            yield
        finally:
            _in_operation.reset(token)

    @asynccontextmanager
    async def _aoperation(self, busy_seconds: float | None) -> AsyncIterator[None]:
        if _in_operation.get():
            yield
            return
        if self._aon_activity is not None:
            await self._aon_activity(busy_seconds)
        elif self._on_activity is not None:
            await asyncio.to_thread(self._on_activity, busy_seconds)  # it may call the Kubernetes API
        token = _in_operation.set(True)
        try:
            yield
        finally:
            _in_operation.reset(token)

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
        with self._operation(float(seconds)):
            result = self._transport.execute(command, timeout=seconds, max_output=self._max_output, cwd=self._cwd)
        return _execute_response(result)

    async def aexecute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        seconds = self._timeout(timeout)
        async with self._aoperation(float(seconds)):
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

    # -- upload / download -----------------------------------------------------------

    def _plan_upload(self, files: Sequence[tuple[str, bytes]]) -> _UploadPlan:
        plan = _UploadPlan(paths=[p for p, _ in files], items=[], positions=[], refused={})
        for index, (path, content) in enumerate(files):
            try:
                resolved = self._policy.resolve(path, write=True)
            except PathRefused as refusal:
                plan.refused[index] = refusal
                continue
            plan.items.append((resolved.real, content, resolved.confine))
            plan.positions.append(index)
        return plan

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Write files of any size and bytes; parents are created, existing files overwritten."""
        plan = self._plan_upload(files)
        with self._operation(None):
            codes = self._transport.upload(plan.items) if plan.items else []
        return plan.finish(codes)

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        plan = self._plan_upload(files)
        async with self._aoperation(None):
            codes = await self._transport.aupload(plan.items) if plan.items else []
        return plan.finish(codes)

    def _plan_download(self, paths: Sequence[str]) -> _DownloadPlan:
        plan = _DownloadPlan(paths=list(paths), items=[], positions=[], refused={})
        for index, path in enumerate(paths):
            try:
                resolved = self._policy.resolve(path)
            except PathRefused as refusal:
                plan.refused[index] = refusal
                continue
            plan.items.append((resolved.real, resolved.confine))
            plan.positions.append(index)
        return plan

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Read files byte-exact; errors: file_not_found, is_directory, permission_denied, invalid_path."""
        plan = self._plan_download(paths)
        with self._operation(None):
            results = self._transport.download(plan.items) if plan.items else []
        return plan.finish(results)

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        plan = self._plan_download(paths)
        async with self._aoperation(None):
            results = await self._transport.adownload(plan.items) if plan.items else []
        return plan.finish(results)

    # -- write / edit / delete -------------------------------------------------------

    def write(self, file_path: str, content: str) -> WriteResult:
        """Create or overwrite `file_path` (parents created) in one upload."""
        refusal = self._write_refusal(file_path)
        if refusal is not None:
            return refusal
        return _write_result(file_path, self.upload_files([(file_path, content.encode("utf-8"))]))

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        refusal = self._write_refusal(file_path)
        if refusal is not None:
            return refusal
        return _write_result(file_path, await self.aupload_files([(file_path, content.encode("utf-8"))]))

    def _write_refusal(self, file_path: str) -> WriteResult | None:
        try:
            self._policy.resolve(file_path, write=True)
        except PathRefused as refusal:
            return WriteResult(error=f"Error: cannot write '{file_path}': {refusal.code}: {refusal.message}")
        return None

    def edit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> EditResult:
        """Replace `old_string` in the file inside the pod (the file never crosses the wire)."""
        prepared = self._prepare_edit(file_path, old_string, new_string, replace_all)
        if isinstance(prepared, EditResult):
            return prepared
        with self._operation(None):
            if isinstance(prepared, str):
                raw = self._transport.script(prepared, idempotent=False)
            else:
                raw = self._transport.staged_script(prepared, pyscripts.build_edit)
        return _edit_result(raw, file_path, old_string)

    async def aedit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> EditResult:
        prepared = self._prepare_edit(file_path, old_string, new_string, replace_all)
        if isinstance(prepared, EditResult):
            return prepared
        async with self._aoperation(None):
            if isinstance(prepared, str):
                raw = await self._transport.ascript(prepared, idempotent=False)
            else:
                raw = await self._transport.astaged_script(prepared, pyscripts.build_edit)
        return _edit_result(raw, file_path, old_string)

    def _prepare_edit(self, file_path: str, old: str, new: str, replace_all: bool) -> EditResult | str | bytes:
        """An immediate result, a command (small payload), or a payload to stage first."""
        if not old:
            return EditResult(error=EMPTY_OLD_STRING_ERROR)
        try:
            resolved = self._policy.resolve(file_path, write=True)
        except PathRefused as refusal:
            return EditResult(error=f"Error: cannot edit '{file_path}': {refusal.code}: {refusal.message}")
        payload = pyscripts.edit_payload(resolved.real, old, new, replace_all=replace_all, confine=resolved.confine)
        if len(payload) <= pyscripts.EDIT_INLINE_MAX:
            return pyscripts.build_edit(pyscripts.encode_payload(payload))
        return payload

    def delete(self, file_path: str) -> DeleteResult:
        """Remove a file or a directory tree (`rm -rf`), within `allow_prefixes` when set."""
        prepared = self._prepare_delete(file_path)
        if isinstance(prepared, DeleteResult):
            return prepared
        with self._operation(None):
            raw = self._transport.script(prepared, idempotent=False)
        return _delete_result(raw, file_path)

    async def adelete(self, file_path: str) -> DeleteResult:
        prepared = self._prepare_delete(file_path)
        if isinstance(prepared, DeleteResult):
            return prepared
        async with self._aoperation(None):
            raw = await self._transport.ascript(prepared, idempotent=False)
        return _delete_result(raw, file_path)

    def _prepare_delete(self, file_path: str) -> DeleteResult | str:
        try:
            resolved = self._policy.resolve(file_path, write=True)
        except PathRefused as refusal:
            return DeleteResult(error=f"Error: cannot delete '{file_path}': {refusal.code}: {refusal.message}")
        if resolved.virtual == "/" or (resolved.confine and normalize(resolved.real) == normalize(resolved.confine)):
            return DeleteResult(error=f"Error: refusing to delete the root '{file_path}'")
        return commands.build_delete(resolved.real, resolved.confine)

    # -- ls / grep / glob / read -----------------------------------------------------

    def ls(self, path: str) -> LsResult:
        """List a directory in one python3 run (explicit error when python3 is missing)."""
        prepared = self._prepare_ls(path)
        if isinstance(prepared, LsResult):
            return prepared
        with self._operation(None):
            raw = self._transport.script(pyscripts.build_ls(prepared.real, prepared.confine), idempotent=True)
        return _ls_result(raw, path, prepared)

    async def als(self, path: str) -> LsResult:
        prepared = self._prepare_ls(path)
        if isinstance(prepared, LsResult):
            return prepared
        async with self._aoperation(None):
            raw = await self._transport.ascript(pyscripts.build_ls(prepared.real, prepared.confine), idempotent=True)
        return _ls_result(raw, path, prepared)

    def _prepare_ls(self, path: str) -> LsResult | ResolvedPath:
        try:
            return self._policy.resolve(path)
        except PathRefused as refusal:
            return LsResult(error=f"Path '{path}': {refusal.code}")

    def grep(
        self, pattern: str, path: str | None = None, glob: str | None = None, *, max_count: int | None = None
    ) -> GrepResult:
        """Literal search (GNU grep where the probe found it, else one python3 run): matches sorted by
        path (`commands.GREP_ORDER`), `truncated` when capped, errors explicit."""
        with self._operation(None):
            return run_sync(self._grep_flow(pattern, path, glob, max_count))

    async def agrep(
        self, pattern: str, path: str | None = None, glob: str | None = None, *, max_count: int | None = None
    ) -> GrepResult:
        async with self._aoperation(None):
            return await run_async(self._grep_flow(pattern, path, glob, max_count))

    def _grep_flow(self, pattern: str, path: str | None, glob: str | None, max_count: int | None) -> Flow[GrepResult]:
        info: RuntimeInfo = yield Call(self._transport.runtime_info, self._transport.aruntime_info)
        root = self._search_root(path, info.base_dir if self._needs_base_dir(path) else "")
        if isinstance(root, GrepResult):
            return root
        if info.gnu_grep and commands.gnu_grep_fits(root.real, self.grep_exclude_dirs, glob, root.confine):
            cap = max_count + 1 if max_count is not None else pyscripts.GREP_MATCH_LIMIT + 1
            gnu = commands.build_gnu_grep(
                [p for p in pattern.split("\n") if p] or [pattern],
                root.real,
                exclude_dirs=self.grep_exclude_dirs,
                cap=cap,
                budget=pyscripts.GREP_TIME_BUDGET if info.runner == "timeout" else None,
            )
            raw = yield self._script(gnu, idempotent=True, read_timeout=_GREP_READ_TIMEOUT)
            found = self._gnu_grep_result(raw, cap, max_count)
            if found is not None:
                return found
            # grep failed with nothing found (the path is missing or unreadable), or its output was
            # not UTF-8 (the runtime refuses that): the python version says exactly what happened.
        command = self._grep_command(pattern, root, glob, max_count)
        if isinstance(command, GrepResult):
            return command
        raw = yield self._script(command, idempotent=True, read_timeout=_GREP_READ_TIMEOUT)
        return self._grep_result(raw, path, max_count)

    def _gnu_grep_result(self, raw: RuntimeExec, cap: int, max_count: int | None) -> GrepResult | None:
        killed = raw.exit_code in commands.GREP_KILLED
        if not (raw.exit_code == 0 or killed) or not (raw.stdout.startswith("/") or not raw.stdout):
            return None
        rows = commands.gnu_grep_rows(raw.stdout)
        if rows is None:  # a file name with a line break: the careful parser
            rows = [(r.path, str(r.line), r.text) for r in commands.parse_gnu_grep_slowly(raw.stdout)[0]]
        if not rows and raw.stderr.strip() and not killed:
            return None  # nothing found and grep complained (a missing or unreadable path)
        display = self._policy.display if self._policy.virtual_mode else None
        matches: list[GrepMatch] = (
            [{"path": display(p), "line": int(k), "text": t} for p, k, t in rows[:cap]]
            if display
            else [{"path": p, "line": int(k), "text": t} for p, k, t in rows[:cap]]
        )
        # Cut by `head`, or killed at the time budget: what was found stands.
        truncated = len(rows) >= cap or killed
        if max_count is not None and len(matches) > max_count:
            matches, truncated = matches[:max_count], True
        return GrepResult(matches=matches, truncated=truncated)

    def _script(self, command: str, *, idempotent: bool, read_timeout: float | None = None) -> Call:
        """One internal script on the transport, for either API."""
        return Call(
            lambda: self._transport.script(command, idempotent=idempotent, read_timeout=read_timeout),
            lambda: self._transport.ascript(command, idempotent=idempotent, read_timeout=read_timeout),
        )

    def _needs_base_dir(self, path: str | None) -> bool:
        return path is None and not self._policy.virtual_mode and not self._cwd

    def _search_root(self, path: str | None, base_dir: str) -> ResolvedPath | GrepResult:
        # No path: the directory commands run in (as `grep -r .` would).
        if path is None and not self._policy.virtual_mode:
            path = self._cwd or base_dir
        try:
            return self._policy.resolve_dir(path)
        except PathRefused as refusal:
            return GrepResult(error=f"Path '{path}': {refusal.code}")

    def _grep_command(
        self, pattern: str, root: ResolvedPath, glob: str | None, max_count: int | None
    ) -> str | GrepResult:
        try:
            return pyscripts.build_grep(
                pattern,
                root.real,
                glob,
                max_count=max_count,
                exclude_dirs=self.grep_exclude_dirs,
                confine=root.confine,
            )
        except ValueError as exc:
            return GrepResult(error=f"Error: {exc}")

    def _grep_result(self, raw: RuntimeExec, path: str | None, max_count: int | None) -> GrepResult:
        shown = path or "."
        answer = pyscripts.parse_json_lines(raw.stdout)
        if answer.error is not None:
            return GrepResult(error=f"Path '{shown}': {answer.error}")
        if answer.done is None:
            return GrepResult(error=f"Path '{shown}': grep failed in the sandbox: {_failure(raw)}")
        found = pyscripts.grep_matches(answer)
        found.sort(key=commands.GREP_ORDER)  # it walked a directory's files before its subdirectories
        matches: list[GrepMatch] = [{"path": self._policy.display(p), "line": n, "text": t} for p, n, t in found]
        truncated = bool(answer.done.get("trunc"))
        if max_count is not None and len(matches) > max_count:
            matches, truncated = matches[:max_count], True
        return GrepResult(matches=matches, truncated=truncated)

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        """deepagents' own glob (absolute file paths), with virtual paths mapped."""
        with self._operation(None):
            return run_sync(self._glob_flow(pattern, path))

    async def aglob(self, pattern: str, path: str | None = None) -> GlobResult:
        async with self._aoperation(None):
            return await run_async(self._glob_flow(pattern, path))

    def _glob_flow(self, pattern: str, path: str | None) -> Flow[GlobResult]:
        root = self._glob_root(path)
        if isinstance(root, GlobResult):
            return root
        refusal = yield from self._confine_flow(root)
        if refusal:
            return GlobResult(error=f"Path '{path}': {refusal}")
        result = yield Call(super().glob, super().aglob, (pattern, self._pod_path(path, root)))
        return self._map_glob(result, root)

    def _glob_root(self, path: str | None) -> ResolvedPath | GlobResult:
        try:
            return self._policy.resolve_dir(path)
        except PathRefused as refusal:
            return GlobResult(error=f"Path '{path}': {refusal.code}")

    def _map_glob(self, result: GlobResult, root: ResolvedPath) -> GlobResult:
        if not self._policy.virtual_mode:
            return result
        if result.error is not None:
            result.error = result.error.replace(root.real, root.virtual)
        if result.matches is not None:
            mapped: list[FileInfo] = []
            for info in result.matches:
                virtual = self._policy.to_virtual(info["path"])
                if virtual is not None:
                    mapped.append({**info, "path": virtual})
            result.matches = mapped
        return result

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        """deepagents' paginated read (one round trip), with virtual paths mapped and confined."""
        with self._operation(None):
            return run_sync(self._read_flow(file_path, offset, limit))

    async def aread(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        async with self._aoperation(None):
            return await run_async(self._read_flow(file_path, offset, limit))

    def _read_flow(self, file_path: str, offset: int, limit: int) -> Flow[ReadResult]:
        resolved = self._read_target(file_path)
        if isinstance(resolved, ReadResult):
            return resolved
        refusal = yield from self._confine_flow(resolved)
        if refusal:
            return ReadResult(error=f"File '{file_path}': {refusal}")
        args = (self._pod_path(file_path, resolved), offset, limit)
        return _map_read((yield Call(super().read, super().aread, args)), resolved)

    def _confine_flow(self, resolved: ResolvedPath) -> Flow[str | None]:
        """Before deepagents' own scripts run: refuse a symlink out of the confinement root, and a
        name those scripts cannot carry (not UTF-8). None when the path may go ahead."""
        if resolved.confine:
            raw = yield self._script(_confine_cmd(resolved), idempotent=True)
            refusal = self._confine_refusal(raw)
            if refusal:
                return refusal
        return _NOT_UTF8 if _not_utf8(resolved.real) else None

    def _read_target(self, file_path: str) -> ResolvedPath | ReadResult:
        try:
            return self._policy.resolve(file_path)
        except PathRefused as refusal:
            return ReadResult(error=f"File '{file_path}': {refusal.code}")

    def _pod_path(self, given: str | None, resolved: ResolvedPath) -> str:
        # Outside virtual mode deepagents sees the caller's own spelling (its messages echo it).
        return resolved.real if self._policy.virtual_mode or given is None else given

    @staticmethod
    def _confine_refusal(raw: RuntimeExec) -> str | None:
        answer = commands.parse_marker(raw.stdout, "@C")
        return None if answer == "ok" else answer


# -- pure helpers ----------------------------------------------------------------------


def _check_timeout(timeout: int) -> int:
    if timeout < 0 or timeout > MAX_COMMAND_TIMEOUT:
        raise ValueError(f"timeout must be between 0 and {MAX_COMMAND_TIMEOUT} seconds, got {timeout}")
    # 0 means "no per-call limit"; the pod still gets the maximum so nothing runs forever.
    return math.ceil(timeout) or MAX_COMMAND_TIMEOUT


def _not_utf8(path: str) -> bool:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _execute_response(result: CommandResult) -> ExecuteResponse:
    return ExecuteResponse(output=result.output, exit_code=result.exit_code, truncated=result.truncated)


def _write_result(file_path: str, responses: list[FileUploadResponse]) -> WriteResult:
    error = responses[0].error
    if error:
        return WriteResult(error=f"Failed to write file '{file_path}': {error}")
    return WriteResult(path=file_path)


def _failure(raw: RuntimeExec) -> str:
    text = (raw.stderr or raw.stdout).strip()
    if "python3" in text and ("No such file" in text or "not found" in text):
        return "python3 is not installed in the sandbox image"
    return text[:300] or f"exit code {raw.exit_code}"


def _ls_result(raw: RuntimeExec, path: str, resolved: ResolvedPath) -> LsResult:
    answer = pyscripts.parse_json_lines(raw.stdout)
    if answer.error is not None:
        return LsResult(error=f"Path '{path}': {answer.error}")
    if answer.done is None:
        return LsResult(error=f"Path '{path}': ls failed in the sandbox: {_failure(raw)}")
    base = resolved.virtual.rstrip("/")
    entries: list[FileInfo] = []
    for entry in sorted(pyscripts.ls_entries(answer), key=lambda e: e.name):
        info: FileInfo = {"path": f"{base}/{entry.name}", "is_dir": entry.is_dir}
        if entry.size is not None:
            info["size"] = entry.size
        if entry.modified_at is not None:
            info["modified_at"] = entry.modified_at
        entries.append(info)
    return LsResult(entries=entries)


_EDIT_MESSAGES: Final = {
    "file_not_found": "Error: File '{path}' not found",
    "permission_denied": "Error: Permission denied editing file '{path}'",
    "invalid_path": "Error: invalid_path: '{path}' leads outside the allowed root",
    "not_a_file": "Error: '{path}' is not a regular file",
    "not_a_text_file": "Error: File '{path}' is not a text file",
    "string_not_found": "Error: String not found in file: '{old}'",
    "multiple_occurrences": (
        "Error: String '{old}' appears multiple times ({count} occurrences). "
        "Use replace_all=True to replace all occurrences."
    ),
}


def _edit_result(raw: RuntimeExec, file_path: str, old_string: str) -> EditResult:
    lines = raw.stdout.strip().splitlines()
    try:
        data = json.loads(lines[-1]) if lines else None
    except (ValueError, RecursionError):
        data = None
    count = data.get("count", 1) if isinstance(data, dict) else None
    if not isinstance(data, dict) or (type(count) is not int and "error" not in data):
        return EditResult(error=f"Error editing file '{file_path}': {_failure(raw)}")
    if "error" in data:
        error = str(data["error"])[:200]
        template = _EDIT_MESSAGES.get(error, "Error editing file '{path}': {error} {detail}")
        return EditResult(
            error=template.format(
                path=file_path,
                old=old_string,
                count=str(data.get("count", ""))[:20],
                error=error,
                detail=str(data.get("detail", ""))[:200],
            ).rstrip()
        )
    return EditResult(path=file_path, occurrences=count)


def _delete_result(raw: RuntimeExec, file_path: str) -> DeleteResult:
    try:
        answer = commands.parse_marker(raw.stdout, "@X")
    except Exception:
        return DeleteResult(error=f"Error deleting file '{file_path}': {_failure(raw)}")
    if answer == "ok":
        return DeleteResult(path=file_path)
    if answer == "file_not_found":
        return DeleteResult(error=f"Error: '{file_path}' not found")
    return DeleteResult(error=f"Error deleting file '{file_path}': {answer}")


def _confine_cmd(resolved: ResolvedPath) -> str:
    return commands.build_confine_check(resolved.real, resolved.confine)


def _map_read(result: ReadResult, resolved: ResolvedPath) -> ReadResult:
    if result.error is not None and resolved.real != resolved.virtual:
        result.error = result.error.replace(resolved.real, resolved.virtual)
    return result


__all__ = ["DEFAULT_COMMAND_TIMEOUT", "DEFAULT_MAX_OUTPUT", "MAX_COMMAND_TIMEOUT", "PodSandbox"]
