"""`SandboxFiles`: every file operation of the sandbox backend (upload, download, write, edit,
delete, ls, grep, glob, read), sync and async.

Each operation is pure preparation (the path rules of `paths`, a command from `commands` or
`pyscripts`), one call on the transport, and pure interpretation (`file_results`). Where an
operation takes more than one step (grep, glob, read) the steps are one flow (`flows`) both APIs
run. `PodSandbox` holds one and delegates its file operations to it; it gives it the transport,
the path policy, the working directory, the activity hooks, and itself as the shell on which
deepagents' own glob and read scripts run (`BaseSandbox.glob`, `BaseSandbox.read`, through its
`execute`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from typing import Final

from deepagents.backends.protocol import (
    DeleteResult,
    EditResult,
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

from . import commands, file_results, gnu_grep, pyscripts
from .alarms import ALARMS
from .flows import Call, Flow, run_async, run_sync
from .paths import PathPolicy, PathRefused, ResolvedPath, normalize
from .probe import RuntimeInfo
from .protocol import GREP_READ_MARGIN, GREP_TIME_BUDGET
from .sandbox_activity import ActivityHooks
from .transport import RuntimeTransport
from .wire import RuntimeExec

_GREP_READ_TIMEOUT: Final = GREP_TIME_BUDGET + GREP_READ_MARGIN
_STOP_READ_TIMEOUT: Final = 10.0
"""Seconds the request stopping a grep at its budget may take (it lists /proc and kills two processes)."""
_log = logging.getLogger(__name__)


class SandboxFiles:
    """The file operations over `transport`, confined by `policy` (see the module docstring).

    Args:
        shell: the sandbox whose `execute` runs deepagents' own glob and read scripts, and whose
            `grep_exclude_dirs` grep skips (the `PodSandbox` holding this).
        transport: the pod's runtime.
        policy: the path rules.
        cwd: the directory a search without a path starts from ("" for the runtime's base directory).
        activity: one report per operation.
    """

    def __init__(
        self, shell: BaseSandbox, transport: RuntimeTransport, policy: PathPolicy, cwd: str, activity: ActivityHooks
    ) -> None:
        self._shell = shell
        self._transport = transport
        self._policy = policy
        self._cwd = cwd
        self._activity = activity

    # -- upload / download -----------------------------------------------------------

    def _plan_upload(self, files: Sequence[tuple[str, bytes]]) -> file_results.UploadPlan:
        plan = file_results.UploadPlan(paths=[p for p, _ in files], items=[], positions=[], refused={})
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
        with self._activity.operation(None):
            codes = self._transport.upload(plan.items) if plan.items else []
        return plan.finish(codes)

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        plan = self._plan_upload(files)
        async with self._activity.aoperation(None):
            codes = await self._transport.aupload(plan.items) if plan.items else []
        return plan.finish(codes)

    def _plan_download(self, paths: Sequence[str]) -> file_results.DownloadPlan:
        plan = file_results.DownloadPlan(paths=list(paths), items=[], positions=[], refused={})
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
        with self._activity.operation(None):
            results = self._transport.download(plan.items) if plan.items else []
        return plan.finish(results)

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        plan = self._plan_download(paths)
        async with self._activity.aoperation(None):
            results = await self._transport.adownload(plan.items) if plan.items else []
        return plan.finish(results)

    # -- write / edit / delete -------------------------------------------------------

    def write(self, file_path: str, content: str) -> WriteResult:
        """Create or overwrite `file_path` (parents created) in one upload."""
        refusal = self._write_refusal(file_path)
        if refusal is not None:
            return refusal
        return file_results.write_result(file_path, self.upload_files([(file_path, content.encode("utf-8"))]))

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        refusal = self._write_refusal(file_path)
        if refusal is not None:
            return refusal
        return file_results.write_result(file_path, await self.aupload_files([(file_path, content.encode("utf-8"))]))

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
        with self._activity.operation(None):
            if isinstance(prepared, str):
                raw = self._transport.script(prepared, idempotent=False)
            else:
                raw = self._transport.staged_script(prepared, pyscripts.build_edit)
        return file_results.edit_result(raw, file_path, old_string)

    async def aedit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> EditResult:
        prepared = self._prepare_edit(file_path, old_string, new_string, replace_all)
        if isinstance(prepared, EditResult):
            return prepared
        async with self._activity.aoperation(None):
            if isinstance(prepared, str):
                raw = await self._transport.ascript(prepared, idempotent=False)
            else:
                raw = await self._transport.astaged_script(prepared, pyscripts.build_edit)
        return file_results.edit_result(raw, file_path, old_string)

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
        with self._activity.operation(None):
            raw = self._transport.script(prepared, idempotent=False)
        return file_results.delete_result(raw, file_path)

    async def adelete(self, file_path: str) -> DeleteResult:
        prepared = self._prepare_delete(file_path)
        if isinstance(prepared, DeleteResult):
            return prepared
        async with self._activity.aoperation(None):
            raw = await self._transport.ascript(prepared, idempotent=False)
        return file_results.delete_result(raw, file_path)

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
        with self._activity.operation(None):
            raw = self._transport.script(pyscripts.build_ls(prepared.real, prepared.confine), idempotent=True)
        return file_results.ls_result(raw, path, prepared)

    async def als(self, path: str) -> LsResult:
        prepared = self._prepare_ls(path)
        if isinstance(prepared, LsResult):
            return prepared
        async with self._activity.aoperation(None):
            raw = await self._transport.ascript(pyscripts.build_ls(prepared.real, prepared.confine), idempotent=True)
        return file_results.ls_result(raw, path, prepared)

    def _prepare_ls(self, path: str) -> LsResult | ResolvedPath:
        try:
            return self._policy.resolve(path)
        except PathRefused as refusal:
            return LsResult(error=f"Path '{path}': {refusal.code}")

    def grep(
        self, pattern: str, path: str | None = None, glob: str | None = None, *, max_count: int | None = None
    ) -> GrepResult:
        """Literal search (GNU grep where the probe found it, else one python3 run): matches sorted by
        path (`gnu_grep.GREP_ORDER`), `truncated` when capped, errors explicit."""
        with self._activity.operation(None):
            return run_sync(self._grep_flow(pattern, path, glob, max_count))

    async def agrep(
        self, pattern: str, path: str | None = None, glob: str | None = None, *, max_count: int | None = None
    ) -> GrepResult:
        async with self._activity.aoperation(None):
            return await run_async(self._grep_flow(pattern, path, glob, max_count))

    def _grep_flow(self, pattern: str, path: str | None, glob: str | None, max_count: int | None) -> Flow[GrepResult]:
        info: RuntimeInfo = yield Call(self._transport.runtime_info, self._transport.aruntime_info)
        root = self._search_root(path, info.base_dir if self._needs_base_dir(path) else "")
        if isinstance(root, GrepResult):
            return root
        if info.gnu_grep and gnu_grep.gnu_grep_fits(root.real, self._shell.grep_exclude_dirs, glob, root.confine):
            cap = max_count + 1 if max_count is not None else pyscripts.GREP_MATCH_LIMIT + 1
            tag = gnu_grep.new_tag()
            gnu = gnu_grep.build_gnu_grep(
                [p for p in pattern.split("\n") if p] or [pattern],
                root.real,
                exclude_dirs=self._shell.grep_exclude_dirs,
                cap=cap,
                tag=tag,
            )
            raw, stopped = yield Call(lambda: self._search(gnu, tag), lambda: self._asearch(gnu, tag))
            found = self._gnu_grep_result(raw, cap, max_count, stopped)
            if found is not None:
                return found
            # grep failed with nothing found (the path is missing or unreadable), or its output was
            # not UTF-8 (the runtime refuses that): the python version says exactly what happened.
        command = self._grep_command(pattern, root, glob, max_count)
        if isinstance(command, GrepResult):
            return command
        raw = yield self._script(command, idempotent=True, read_timeout=_GREP_READ_TIMEOUT)
        return self._grep_result(raw, path, max_count)

    # -- a GNU grep search under its time budget: the client keeps the time, and at the budget stops the
    # search by its tag (gnu_grep.build_stop_search) and keeps what it found; no watchdog runs in the pod.
    def _search(self, command: str, tag: str) -> tuple[RuntimeExec, bool]:
        """The search and whether its budget ran out (then it was stopped)."""
        stopped = threading.Event()

        def stop() -> None:
            stopped.set()
            self._stop_search(tag)

        alarm = ALARMS.after(GREP_TIME_BUDGET, stop)
        try:
            raw = self._transport.script(command, idempotent=True, read_timeout=_GREP_READ_TIMEOUT)
        finally:
            alarm.cancel()
        return raw, stopped.is_set()

    async def _asearch(self, command: str, tag: str) -> tuple[RuntimeExec, bool]:
        search = asyncio.ensure_future(
            self._transport.ascript(command, idempotent=True, read_timeout=_GREP_READ_TIMEOUT)
        )
        try:
            done, _ = await asyncio.wait({search}, timeout=GREP_TIME_BUDGET)
            if done:
                return search.result(), False
            try:
                await self._transport.ascript(
                    gnu_grep.build_stop_search(tag), idempotent=False, read_timeout=_STOP_READ_TIMEOUT
                )
            except Exception as exc:  # the search's own answer (or its read timeout) still comes
                _log.warning("stopping a grep at its time budget failed: %s", exc)
            return await search, True
        finally:
            search.cancel()  # only if the caller was cancelled meanwhile: done otherwise

    def _stop_search(self, tag: str) -> None:
        try:
            self._transport.script(gnu_grep.build_stop_search(tag), idempotent=False, read_timeout=_STOP_READ_TIMEOUT)
        except Exception as exc:  # as above
            _log.warning("stopping a grep at its time budget failed: %s", exc)

    def _gnu_grep_result(self, raw: RuntimeExec, cap: int, max_count: int | None, stopped: bool) -> GrepResult | None:
        killed = raw.exit_code in gnu_grep.GREP_KILLED or (stopped and raw.exit_code == 0)
        if not (raw.exit_code == 0 or killed) or not (raw.stdout.startswith("/") or not raw.stdout):
            return None
        rows = gnu_grep.gnu_grep_rows(raw.stdout)
        if rows is None:  # a file name with a line break: the careful parser
            rows = [(r.path, str(r.line), r.text) for r in gnu_grep.parse_gnu_grep_slowly(raw.stdout)[0]]
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
                exclude_dirs=self._shell.grep_exclude_dirs,
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
            return GrepResult(error=f"Path '{shown}': grep failed in the sandbox: {file_results.failure(raw)}")
        found = pyscripts.grep_matches(answer)
        found.sort(key=gnu_grep.GREP_ORDER)  # it walked a directory's files before its subdirectories
        matches: list[GrepMatch] = [{"path": self._policy.display(p), "line": n, "text": t} for p, n, t in found]
        truncated = bool(answer.done.get("trunc"))
        if max_count is not None and len(matches) > max_count:
            matches, truncated = matches[:max_count], True
        return GrepResult(matches=matches, truncated=truncated)

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        """deepagents' own glob (absolute file paths), with virtual paths mapped."""
        with self._activity.operation(None):
            return run_sync(self._glob_flow(pattern, path))

    async def aglob(self, pattern: str, path: str | None = None) -> GlobResult:
        async with self._activity.aoperation(None):
            return await run_async(self._glob_flow(pattern, path))

    def _glob_flow(self, pattern: str, path: str | None) -> Flow[GlobResult]:
        root = self._glob_root(path)
        if isinstance(root, GlobResult):
            return root
        refusal = yield from self._confine_flow(root)
        if refusal:
            return GlobResult(error=f"Path '{path}': {refusal}")
        # deepagents' own glob, run on the shell (its `execute`): absolute paths, its messages.
        args = (self._shell, pattern, self._pod_path(path, root))
        result = yield Call(BaseSandbox.glob, BaseSandbox.aglob, args)
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
        with self._activity.operation(None):
            return run_sync(self._read_flow(file_path, offset, limit))

    async def aread(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        async with self._activity.aoperation(None):
            return await run_async(self._read_flow(file_path, offset, limit))

    def _read_flow(self, file_path: str, offset: int, limit: int) -> Flow[ReadResult]:
        resolved = self._read_target(file_path)
        if isinstance(resolved, ReadResult):
            return resolved
        refusal = yield from self._confine_flow(resolved)
        if refusal:
            return ReadResult(error=f"File '{file_path}': {refusal}")
        args = (self._shell, self._pod_path(file_path, resolved), offset, limit)
        return file_results.map_read((yield Call(BaseSandbox.read, BaseSandbox.aread, args)), resolved)

    def _confine_flow(self, resolved: ResolvedPath) -> Flow[str | None]:
        """Before deepagents' own scripts run: refuse a symlink out of the confinement root, and a
        name those scripts cannot carry (not UTF-8). None when the path may go ahead."""
        if resolved.confine:
            raw = yield self._script(file_results.confine_cmd(resolved), idempotent=True)
            refusal = self._confine_refusal(raw)
            if refusal:
                return refusal
        return file_results.NOT_UTF8 if file_results.not_utf8(resolved.real) else None

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


__all__ = ["SandboxFiles"]
