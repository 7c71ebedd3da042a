"""python3 scripts for ls, grep and edit (the files scripts/ls.py, grep.py, edit.py), with their builders and parsers.

Each runs as `python3 -S -c <script> <json>` directly (the runtime execs argv
without a shell), answers in one round trip with JSON lines, and is ASCII on
stdout (`json.dumps` escapes everything, and python writes tracebacks to stderr
with backslash escapes), so the runtime can always decode it. Parameters travel
as one ASCII JSON argument; file names that are not UTF-8 cross as lone
surrogates, which python's filesystem encoding maps back to the same bytes.
Start-up dominates these helpers, so they skip `site` (-S) and import only what
they use (glob/fnmatch only when a grep has a glob filter).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from .errors import MalformedResponse
from .protocol import EDIT_INLINE_MAX, GREP_MATCH_LIMIT, GREP_TIME_BUDGET  # noqa: F401  (re-exported)
from .script_text import load_pyscript, runtime_command

_LS_SCRIPT: Final = load_pyscript("ls.py")


def _json_arg(payload: dict[str, Any]) -> str:
    # ensure_ascii keeps lone surrogates (non-UTF-8 names) as \udcXX escapes.
    return json.dumps(payload, ensure_ascii=True)


def python_command(script: str, arg: str) -> str:
    return runtime_command(["python3", "-S", "-c", script, arg])


def build_ls(path: str, confine: str) -> str:
    return python_command(_LS_SCRIPT, _json_arg({"p": path, "r": confine}))


@dataclass(frozen=True)
class LsEntry:
    name: str
    is_dir: bool
    size: int | None
    modified_at: str | None


@dataclass
class ScriptAnswer:
    """JSON-lines answer of a script: records, an error code, and whether it finished."""

    records: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    done: dict[str, Any] | None = None
    garbage: list[str] = field(default_factory=list)


def parse_json_lines(stdout: str) -> ScriptAnswer:
    answer = ScriptAnswer()
    for line in stdout.splitlines():
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the stack
            answer.garbage.append(line)
            continue
        if not isinstance(data, dict):
            answer.garbage.append(line)
        elif "error" in data:
            answer.error = str(data["error"])
        elif "done" in data:
            answer.done = data
        else:
            answer.records.append(data)
    return answer


def ls_entries(answer: ScriptAnswer) -> list[LsEntry]:
    """The entries of an ls answer; a record of the wrong shape raises MalformedResponse."""
    entries = []
    for rec in answer.records:
        name, size, mtime = rec.get("n"), rec.get("s"), rec.get("m")
        if not isinstance(name, str) or not (size is None or _is_int(size)):
            raise MalformedResponse(f"ls answered a record of the wrong shape: {str(rec)[:200]}")
        modified_at: str | None = None
        if mtime is not None:
            try:
                modified_at = datetime.fromtimestamp(_number(mtime), tz=UTC).isoformat()
            except (ValueError, OverflowError, OSError) as exc:  # years outside 1..9999, NaN, not a number
                raise MalformedResponse(f"ls answered an impossible time: {str(rec)[:200]}") from exc
        entries.append(LsEntry(name=name, is_dir=rec.get("d") is True, size=size, modified_at=modified_at))
    return entries


def _is_int(value: object) -> bool:
    return type(value) is int


def _number(value: object) -> float:
    if type(value) not in (int, float):
        raise ValueError(f"not a number: {value!r}")
    return float(value)  # type: ignore[arg-type]


def grep_matches(answer: ScriptAnswer) -> list[tuple[str, int, str]]:
    """(path, line, text) of a grep answer's records; a record of the wrong shape raises MalformedResponse."""
    out: list[tuple[str, int, str]] = []
    for rec in answer.records:
        path, line, text = rec.get("p"), rec.get("l"), rec.get("t")
        if not (isinstance(path, str) and type(line) is int and isinstance(text, str)):
            raise MalformedResponse(f"grep answered a record of the wrong shape: {str(rec)[:200]}")
        out.append((path, line, text))
    return out


# -------------------------------------------------------------------------------- grep

_GREP_SCRIPT: Final = load_pyscript("grep.py")
# Literal byte matching, so any encoding works; a pattern with newlines is a set of
# alternatives (as GNU grep reads it). Symlinks met while walking are skipped (as
# `grep -r`), a search path that is itself a file is searched directly.


def expand_braces(pattern: str, limit: int = 256) -> list[str]:
    """Expand `{a,b}` groups (nested too), bounded; unbalanced braces stay literal."""
    start = pattern.find("{")
    if start < 0:
        return [pattern]
    depth = 0
    for end in range(start, len(pattern)):
        if pattern[end] == "{":
            depth += 1
        elif pattern[end] == "}":
            depth -= 1
            if depth == 0:
                break
    else:
        return [pattern]
    body, parts, depth, current = pattern[start + 1 : end], [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        current += ch
    parts.append(current)
    prefix, suffix = pattern[:start], pattern[end + 1 :]
    if len(parts) < 2:
        return [prefix + "{" + body + "}" + tail for tail in expand_braces(suffix, limit)]
    out: list[str] = []
    for part in parts:
        for item in expand_braces(part + suffix, limit):
            out.append(prefix + item)
            if len(out) > limit:
                raise ValueError("glob pattern expands to too many alternatives")
    return out


def _negations(glob_pattern: str) -> str:
    # fnmatch reads "[^...]" literally; grep --include (glibc fnmatch) negates. Align.
    return glob_pattern.replace("[^", "[!")


def build_grep(
    pattern: str,
    path: str,
    glob_pattern: str | None,
    *,
    max_count: int | None,
    exclude_dirs: Sequence[str],
    confine: str,
    time_budget: float = GREP_TIME_BUDGET,
) -> str:
    """One python3 run that walks `path` and prints every matching line as JSON."""
    alternatives = [p for p in pattern.split("\n") if p] or [pattern]
    mode: str | None = None
    globs: list[str] = []
    if glob_pattern:
        mode = "path" if "/" in glob_pattern else "base"
        globs = [_negations(g).lstrip("/") if mode == "path" else _negations(g) for g in expand_braces(glob_pattern)]
    cap = max_count + 1 if max_count is not None else GREP_MATCH_LIMIT + 1
    payload = {
        "p": path,
        "q": alternatives,
        "g": globs,
        "gm": mode,
        "x": list(exclude_dirs),
        "c": cap,
        "t": time_budget,
        "r": confine,
    }
    return python_command(_GREP_SCRIPT, _json_arg(payload))


# -------------------------------------------------------------------------------- edit

_EDIT_SCRIPT: Final = load_pyscript("edit.py")
# read() hands the model LF-only text, so `old` may lack the file's CR: try it as
# sent, then CRLF- and LF-normalized, and transform `new` the same way so the file
# keeps its line endings.


def edit_payload(path: str, old: str, new: str, *, replace_all: bool, confine: str) -> bytes:
    return json.dumps({"p": path, "o": old, "n": new, "a": replace_all, "r": confine}).encode("ascii")


def build_edit(payload_or_staged_path: str) -> str:
    """`payload_or_staged_path`: the JSON payload itself, or the absolute path of its staged copy."""
    return python_command(_EDIT_SCRIPT, payload_or_staged_path)


def encode_payload(payload: bytes) -> str:
    """The payload as the command argument (it is ASCII JSON already)."""
    return payload.decode("ascii")
