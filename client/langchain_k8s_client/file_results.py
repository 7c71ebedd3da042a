"""What the file operations decide without the pod: upload and download plans, and the answers mapped.

Pure: each function turns the runtime's raw answer (`wire.RuntimeExec`) or the path policy's
refusals into the deepagents result types. `sandbox_files` sends; this only reads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from deepagents.backends.protocol import (
    DeleteResult,
    EditResult,
    FileDownloadResponse,
    FileInfo,
    FileUploadResponse,
    LsResult,
    ReadResult,
    WriteResult,
)

from . import commands, pyscripts
from .paths import PathRefused, ResolvedPath
from .runtime import Downloaded
from .wire import RuntimeExec

# deepagents' read/glob scripts encode the path as UTF-8; other operations take any bytes.
NOT_UTF8: Final = "invalid_path (the name is not UTF-8: use download_files, ls or grep)"


@dataclass(frozen=True)
class UploadPlan:
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
class DownloadPlan:
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


def not_utf8(path: str) -> bool:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def write_result(file_path: str, responses: list[FileUploadResponse]) -> WriteResult:
    error = responses[0].error
    if error:
        return WriteResult(error=f"Failed to write file '{file_path}': {error}")
    return WriteResult(path=file_path)


def failure(raw: RuntimeExec) -> str:
    text = (raw.stderr or raw.stdout).strip()
    if "python3" in text and ("No such file" in text or "not found" in text):
        return "python3 is not installed in the sandbox image"
    return text[:300] or f"exit code {raw.exit_code}"


def ls_result(raw: RuntimeExec, path: str, resolved: ResolvedPath) -> LsResult:
    answer = pyscripts.parse_json_lines(raw.stdout)
    if answer.error is not None:
        return LsResult(error=f"Path '{path}': {answer.error}")
    if answer.done is None:
        return LsResult(error=f"Path '{path}': ls failed in the sandbox: {failure(raw)}")
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


EDIT_MESSAGES: Final = {
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


def edit_result(raw: RuntimeExec, file_path: str, old_string: str) -> EditResult:
    lines = raw.stdout.strip().splitlines()
    try:
        data = json.loads(lines[-1]) if lines else None
    except (ValueError, RecursionError):
        data = None
    count = data.get("count", 1) if isinstance(data, dict) else None
    if not isinstance(data, dict) or (type(count) is not int and "error" not in data):
        return EditResult(error=f"Error editing file '{file_path}': {failure(raw)}")
    if "error" in data:
        error = str(data["error"])[:200]
        template = EDIT_MESSAGES.get(error, "Error editing file '{path}': {error} {detail}")
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


def delete_result(raw: RuntimeExec, file_path: str) -> DeleteResult:
    try:
        answer = commands.parse_marker(raw.stdout, "@X")
    except Exception:
        return DeleteResult(error=f"Error deleting file '{file_path}': {failure(raw)}")
    if answer == "ok":
        return DeleteResult(path=file_path)
    if answer == "file_not_found":
        return DeleteResult(error=f"Error: '{file_path}' not found")
    return DeleteResult(error=f"Error deleting file '{file_path}': {answer}")


def confine_cmd(resolved: ResolvedPath) -> str:
    return commands.build_confine_check(resolved.real, resolved.confine)


def map_read(result: ReadResult, resolved: ResolvedPath) -> ReadResult:
    if result.error is not None and resolved.real != resolved.virtual:
        result.error = result.error.replace(resolved.real, resolved.virtual)
    return result
