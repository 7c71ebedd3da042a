"""GNU grep in the pod: `scripts/grep.sh`'s command (where the probe found GNU grep and it answers as the
python version, `pyscripts`, would) and its parsers, the records in grep()'s order. Pure: `build_gnu_grep`
returns the runtime command string, `build_stop_search` the one that stops it at its time budget (the
caller keeps the time: no watchdog process runs beside a search), `parse_gnu_grep` and `gnu_grep_rows`
turn its stdout into records.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from operator import itemgetter
from typing import Final, NamedTuple

from .protocol import GREP_KILLED  # noqa: F401  (re-exported)
from .script_text import load_script, runtime_command, sh_command

_GREP_SCRIPT: Final = load_script("grep.sh")
_STOP_SCRIPT: Final = load_script("stop_search.sh")
SEARCH_MARK: Final = "lkc-"
"""What precedes a search's tag in its shell's $0 and its grep's --label (scripts/stop_search.sh's pattern)."""
_TAG: Final = re.compile(r"[0-9A-Za-z]{2,64}")
_GLOB_CHARS: Final = frozenset("*?[\\")


def gnu_grep_fits(root: str, exclude_dirs: Sequence[str], glob: str | None, confine: str) -> bool:
    """Whether GNU grep answers exactly as the python version would: no glob filter, no
    confinement root, excluded names without glob characters and not naming the root itself."""
    if glob or confine:
        return False
    if any(_GLOB_CHARS.intersection(name) for name in exclude_dirs):
        return False
    return root.rstrip("/").rsplit("/", 1)[-1] not in exclude_dirs


def build_gnu_grep(
    alternatives: Sequence[str], root: str, *, exclude_dirs: Sequence[str], cap: int, tag: str | None = None
) -> str:
    """scripts/grep.sh: fixed-string alternatives under `root`, at most `cap` records. `tag` (a fresh
    random word per search) marks its shell and its grep for `build_stop_search(tag)`."""
    marked = f"{SEARCH_MARK}{tag}" if tag else "lkc"
    args = [f"--label={marked}"] if tag else []
    args += [f"--exclude-dir={name}" for name in exclude_dirs]
    for pattern in alternatives:
        args += ["-e", pattern]
    return runtime_command(["sh", "-c", _GREP_SCRIPT, marked, str(cap), *args, "--", root])


def build_stop_search(tag: str) -> str:
    """scripts/stop_search.sh: SIGKILL to the search `build_gnu_grep(..., tag=tag)` started, if still running."""
    if not _TAG.fullmatch(tag):
        raise ValueError(f"a search tag is 2 to 64 letters or digits, not {tag!r}")
    return sh_command(_STOP_SCRIPT, tag[0], tag[1:])


def new_tag() -> str:
    """A search's tag: 64 random bits, so a stop never meets another search's processes."""
    return secrets.token_hex(8)


class GrepRecord(NamedTuple):
    """One match (a tuple: a frozen dataclass costs ~1 microsecond more per record to make)."""

    path: str
    line: int
    text: str


# One record per line: the path, NUL, the line number, `:`, the text. Three groups: a fourth (the path
# split at its last slash, for the walk order of old) cost 0.2 ms more per 1,000 records.
_GREP_RECORD: Final = re.compile(r"^(/[^\0\n]*)\0([0-9]{1,18}):([^\n]*)\n", re.MULTILINE)

GrepRow = tuple[str, str, str]
"""(path, line number, text) of one match, as `gnu_grep_rows` gives it."""

GREP_ORDER: Final = itemgetter(0)
"""grep()'s order, whichever way it searched: by path (code points), a file's lines as the file has
them (the sorts are stable). A C-level key: sorting 1,000 records costs 0.05 ms."""


def _split_status(stdout: str) -> tuple[str, int | None]:
    """The records and the status of an `@E<status>` line (None without one)."""
    at = 0 if stdout.startswith("@E") else stdout.find("\n@E") + 1  # paths are absolute: "@E" is the status
    if at or stdout.startswith("@E"):
        end = stdout.find("\n", at)
        return stdout[:at], _natural(stdout[at + 2 : end if end >= 0 else len(stdout)])
    return stdout[: stdout.rfind("\n") + 1], None  # after the last line break: nothing, or a record cut short


def gnu_grep_rows(stdout: str) -> list[GrepRow] | None:
    """The records of scripts/grep.sh in `GREP_ORDER`, or None when a file name holds a line break
    (then `parse_gnu_grep` sorts it out).

    One regex pass and one sort (grep() of 1,000 records: 0.35 ms with the dicts on a quiet machine;
    0.55 ms when this kept the python version's walk order, a directory's files before its
    subdirectories, which needed a key made in Python per record)."""
    body, _ = _split_status(stdout)
    found: list[GrepRow] = _GREP_RECORD.findall(body)
    if len(found) != body.count("\n"):
        return None
    found.sort(key=GREP_ORDER)
    return found


def parse_gnu_grep(stdout: str) -> tuple[list[GrepRecord], int | None]:
    """The records (in `GREP_ORDER`) and the status of an `@E<status>` line (None without one;
    scripts/grep.sh prints none: the runtime's exit code and stderr tell)."""
    rows = gnu_grep_rows(stdout)
    if rows is None:
        return parse_gnu_grep_slowly(stdout)  # a file name with a line break in it
    return [GrepRecord(path, int(number), text) for path, number, text in rows], _split_status(stdout)[1]


def parse_gnu_grep_slowly(stdout: str) -> tuple[list[GrepRecord], int | None]:
    """`parse_gnu_grep` record by record: for output whose file names hold line breaks."""
    records: list[GrepRecord] = []
    status: int | None = None
    pos = 0
    while pos < len(stdout):
        if stdout.startswith("@E", pos):
            end = stdout.find("\n", pos)
            word = stdout[pos + 2 : end if end >= 0 else len(stdout)]
            status = _natural(word)
            break
        nul = stdout.find("\0", pos)
        colon = stdout.find(":", nul + 1) if nul >= 0 else -1
        end = stdout.find("\n", colon) if colon >= 0 else -1
        if end < 0 or _natural(stdout[nul + 1 : colon]) is None:
            break  # a record cut short (timeout): what came before stands
        records.append(GrepRecord(stdout[pos:nul], int(stdout[nul + 1 : colon]), stdout[colon + 1 : end]))
        pos = end + 1
    records.sort(key=GREP_ORDER)
    return records, status


_NATURAL: Final = re.compile(r"[0-9]{1,18}")


def _natural(word: str) -> int | None:
    """An ASCII decimal number, else None (`str.isdigit` also accepts "²", which `int` refuses)."""
    return int(word) if _NATURAL.fullmatch(word) else None
