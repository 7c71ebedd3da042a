"""The scripts of the execute wrapper and the file operations (the files in `scripts/`), with their
builders and parsers.

Every script runs as `sh -c <script> lkc <args>` (`sh <args>` for the execute wrapper), all data as
positional arguments, never shell text (`script_text` says why). What the runtime offers is the probe's
(`probe`), GNU grep's command is `gnu_grep`'s, the python3 programs are `pyscripts`'.

Everything here is pure (no I/O): `build_*` returns the runtime command string,
`parse_*` turns the runtime's stdout into results.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from .errors import MalformedResponse

# GNU grep's command and the probe moved to their own modules (issue 50): their names stay importable from here.
from .gnu_grep import (  # noqa: F401
    GREP_KILLED,
    GREP_ORDER,
    GrepRecord,
    GrepRow,
    build_gnu_grep,
    gnu_grep_fits,
    gnu_grep_rows,
    parse_gnu_grep,
    parse_gnu_grep_slowly,
)
from .probe import RUNTIME_DEFAULT_LIMIT, STAGING_DIRNAME, Runner, RuntimeInfo, build_probe, parse_probe  # noqa: F401
from .protocol import (
    RUNTIME_TIMEOUT_EXIT,
    SIGKILLED_EXIT,
    SIGKILLED_NOTE,
    WRAPPER_ERROR_MARKER,
    WRAPPER_MARKER,
    WRAPPER_PREFIX,
)
from .script_text import load_pyscript, load_script, runtime_command, sh_command

# --------------------------------------------------------------------- user commands

# Fallback when the image has no usable `timeout`: a new session killed as a group.
_PY_TIMEOUT: Final = load_pyscript("timeout.py").rstrip("\n")

# scripts/watchdog.sh's RUNNER: the watchdog in the background, the capture on fd 3, nothing else open.
_IN_BACKGROUND: Final = " >&3 2>&1 </dev/null 3>&- &"
_TIMEOUT_SH: Final = 'timeout -s KILL "$1" sh -c "$4"' + _IN_BACKGROUND
_WATCHDOGS: Final[dict[str, str]] = {
    "timeout": _TIMEOUT_SH,
    "python3": "python3 -S -c '" + _PY_TIMEOUT + '\' "$1" "$4"' + _IN_BACKGROUND,
}
# A plain-words command (`runs_in_place`) whose first word is no builtin of dash, bash or BusyBox ash:
# `timeout` runs the program itself, the words split and globbed by the wrapper as the command's own
# `sh` would do them (one exec fewer); a first word that names no program gets the `sh`, which says so.
# shellcheck's SC2086 does not apply: the splitting is the point.
_TIMEOUT_WORDS: Final = (
    'if command -v "${4%% *}" >/dev/null 2>&1; then timeout -s KILL "$1" $4'
    + _IN_BACKGROUND
    + " else "
    + _TIMEOUT_SH
    + " fi"
)
_SHELL_BUILTIN_WORDS: Final = (
    "alias bg bind bltin break builtin caller cd chdir command compgen complete compopt continue declare "
    "dirs disown echo enable eval exec exit export false fc fg getopts hash help history jobs kill let local "
    "logout mapfile popd printf pushd pwd read readarray readonly return set shift shopt source suspend test "
    "times trap true type typeset ulimit umask unalias unset wait [ [[ ]] :"
)
_SHELL_BUILTINS: Final = frozenset(_SHELL_BUILTIN_WORDS.split())

# Images without coreutils/BusyBox `base64` encode with python3 instead.
_PY_BASE64: Final = (
    "python3 -S -c 'import base64,sys;sys.stdout.write(base64.b64encode(sys.stdin.buffer.read()).decode())'"
)

# The user-command wrapper: scripts/watchdog.sh when an in-pod watchdog enforces the timeout,
# scripts/direct.sh when the runtime's own limit comes first (see RuntimeInfo.runner_for).
_WATCHDOG_TEMPLATE: Final = load_script("watchdog.sh")
_DIRECT_TEMPLATE: Final = load_script("direct.sh")
_SUBSHELL: Final = '( eval "set --;$4" )'
# In a subshell `$$` and `$PPID` would name the wrapper and its parent (`kill $$`
# would hit the wrapper), and `$LINENO` is empty under `eval`: a command that
# mentions them gets its own `sh` (the subshell execs it, so a "Killed" notice
# cannot reach the capture).
_OWN_SHELL: Final = '(exec sh -c "$4")'
_OWN_SHELL_WORDS: Final = ("$$", "{$", "PPID", "LINENO")


def needs_own_shell(command: str) -> bool:
    """Whether `command` refers to what differs between a subshell and its own `sh`."""
    return any(word in command for word in _OWN_SHELL_WORDS)


# A single simple command of plain words (no quoting, expansion, redirection, operator, comment or
# line break) whose first word can change nothing the wrapper still needs runs in the wrapper shell
# itself: no subshell fork, as cheap as a bare `sh -c`. It cannot name the wrapper's variables or
# positional parameters (no `$`), and the words left out are the special builtins (an error in one
# exits the shell), reserved words and the builtins that change the shell's state. An external
# command is forked and exec'd either way (caught signals reset on exec); a builtin now costs nothing.
_IN_PLACE: Final = 'eval "$4"'
_PLAIN_WORDS: Final = re.compile(r"[A-Za-z0-9_./:,+@%^*?\[\] -]+")
_NOT_IN_PLACE: Final = frozenset(
    [
        "break",
        ":",
        "continue",
        ".",
        "eval",
        "exec",
        "exit",
        "export",
        "readonly",
        "return",
        "set",
        "shift",
        "times",
        "trap",
        "unset",
        "alias",
        "unalias",
        "read",
        "getopts",
        "wait",
        "umask",
        "ulimit",
        "hash",
        "command",
        "builtin",
        "local",
        "kill",
        "fg",
        "bg",
        "jobs",
        "type",
        "if",
        "then",
        "else",
        "elif",
        "fi",
        "do",
        "done",
        "case",
        "esac",
        "while",
        "until",
        "for",
        "in",
        "function",
        "select",
        "time",
        "{",
        "}",
        "!",
        "[[",
        "]]",
        "",
    ]
)


def runs_in_place(command: str) -> bool:
    """Whether `command` may run in the wrapper shell itself (see `_IN_PLACE`)."""
    if not _PLAIN_WORDS.fullmatch(command):
        return False
    words = command.split()
    return bool(words) and "=" not in words[0] and words[0] not in _NOT_IN_PLACE


def runs_without_shell(command: str) -> bool:
    """Whether `timeout` may run `command`'s program itself (see `_TIMEOUT_WORDS`)."""
    return runs_in_place(command) and command.split()[0] not in _SHELL_BUILTINS


@dataclass(frozen=True)
class UserCommand:
    """A wrapped user command: the wrapper script and its positional arguments ($1...)."""

    script: str
    args: tuple[str, ...]

    @property
    def wrapper(self) -> str:
        """The staged wrapper's file name in the staging dir: named by its content, so any client
        (any version) running the same script shares the file, and one never changes."""
        return f"{WRAPPER_PREFIX}{hashlib.sha256(self.script.encode()).hexdigest()[:20]}.sh"

    def inline(self) -> str:
        """`sh -c <script> sh <args>`: the script travels with the call (~900 bytes)."""
        return runtime_command(["sh", "-c", self.script, "sh", *self.args])

    def staged(self) -> str:
        """`sh -c '. <staged wrapper>' sh <args>`: ~100 bytes. The runtime shlex-splits every command
        in python (~0.15 ms for the inline script, more than the rest of the wrapper's own work), and
        sourcing keeps `$0` as `sh`, as a plain `sh -c` would give the command. The path is relative
        to the runtime's base dir, where every command starts."""
        return runtime_command(["sh", "-c", f". ./{STAGING_DIRNAME}/{self.wrapper}", "sh", *self.args])


def wrapper_missing(raw_stdout: str, raw_stderr: str, exit_code: int, wrapper: str) -> bool:
    """Whether dash could not open the staged wrapper (removed since the probe saw it): then nothing
    ran, so the call may be sent again. Exactly dash's own message and status: the runtime's errors
    (its timeout, say) repeat the whole command line, wrapper name included, after a command ran."""
    message = f"sh: 1: .: cannot open ./{STAGING_DIRNAME}/{wrapper}: "
    return not raw_stdout and exit_code == 2 and raw_stderr.startswith(message) and raw_stderr.count("\n") <= 1


def build_stage_wrapper(temporary: str, final: str) -> str:
    """Put an uploaded wrapper in place atomically (a concurrent reader sees the old file or the whole
    new one); `mv` runs without a shell, the paths are absolute."""
    return runtime_command(["mv", "-f", temporary, final])


def user_command(
    command: str,
    *,
    timeout: int,
    max_output: int,
    staging_dir: str,
    cwd: str,
    runner: Runner,
    has_base64: bool = True,
    capture: str = "o",
    seq: int = 1,
    sweep: int = 0,
) -> UserCommand:
    """Wrap a user command: combined output capped at `max_output` bytes, any bytes kept.

    `runner` is the in-pod watchdog that enforces `timeout` ("none": no watchdog
    process, see `RuntimeInfo.runner_for`). The capture file is `<staging_dir>/<capture>.<seq>`,
    `seq` numbering the client's calls (never reused). `sweep` > 0 makes this a sweeping call:
    in the background once the answer is written, it removes the files of calls `seq - 2 * sweep`
    to `seq - sweep - 1` and creates those of the next `2 * sweep` calls (scripts/capture.sh and
    encode.sh: no call pays an `rm`, nor, mostly, a file creation). The user command is an
    argument, never part of the script: the script depends only on the runner and the encoder.
    """
    encoder = "LC_ALL=C base64" if has_base64 else _PY_BASE64
    if runner == "none":
        run = _IN_PLACE if runs_in_place(command) else _OWN_SHELL if needs_own_shell(command) else _SUBSHELL
        script = _DIRECT_TEMPLATE.replace("RUNNER", run)
    else:
        watchdog = _TIMEOUT_WORDS if runner == "timeout" and runs_without_shell(command) else _WATCHDOGS[runner]
        script = _WATCHDOG_TEMPLATE.replace("RUNNER", watchdog)
    script = script.replace("ENCODER", encoder)
    sweep_arg = str(sweep) if sweep else ""
    args = (str(timeout), str(max_output + 1), staging_dir, command, cwd, capture, str(seq), sweep_arg)
    return UserCommand(script, args)


def build_user_command(
    command: str,
    *,
    timeout: int,
    max_output: int,
    staging_dir: str,
    cwd: str,
    runner: Runner,
    has_base64: bool = True,
    capture: str = "o",
    seq: int = 1,
    sweep: int = 0,
) -> str:
    """`user_command(...)` with the script inline (see `UserCommand.inline`)."""
    return user_command(
        command,
        timeout=timeout,
        max_output=max_output,
        staging_dir=staging_dir,
        cwd=cwd,
        runner=runner,
        has_base64=has_base64,
        capture=capture,
        seq=seq,
        sweep=sweep,
    ).inline()


@dataclass(frozen=True)
class CommandResult:
    """Decoded result of a wrapped user command."""

    output: str
    exit_code: int | None
    truncated: bool
    timed_out: bool


def parse_user_command(
    stdout: str, stderr: str, exit_code: int, *, timeout: int, max_output: int, runner: Runner
) -> CommandResult:
    """Decode the wrapper's answer; `stderr`/`exit_code` are the runtime's own fields."""
    if stdout.startswith(WRAPPER_ERROR_MARKER):
        what = stdout[6:].strip()
        detail = {
            "capture": "cannot create the output capture file in the staging directory",
            "cwd": "cannot enter the working directory",
        }.get(what, what)
        return CommandResult(f"Error: sandbox wrapper failed: {detail}", None, False, False)
    head, _, body = stdout.partition("\n")
    fields = head.split(" ")
    if fields[0] != WRAPPER_MARKER or len(fields) != 4:
        return _runtime_failure(stdout, stderr, exit_code)
    try:
        code = int(fields[1])
    except ValueError:
        return _runtime_failure(stdout, stderr, exit_code)
    try:
        raw = base64.b64decode(body)
    except (binascii.Error, ValueError):
        return CommandResult(f"Error: undecodable command output: {body[:200]!r}", code, False, False)
    truncated = len(raw) > max_output
    text = raw[:max_output].decode("utf-8", errors="replace")
    timed_out = runner != "none" and _killed_at_deadline(code, fields[2], fields[3], timeout)
    if timed_out:
        note = f"Error: command timed out after {timeout} seconds and was killed inside the sandbox."
        text = f"{text}\n{note}" if text else note
        code = RUNTIME_TIMEOUT_EXIT
    elif code == SIGKILLED_EXIT:
        text = f"{text}\n{SIGKILLED_NOTE}" if text else SIGKILLED_NOTE
    return CommandResult(text, code, truncated, timed_out)


def _killed_at_deadline(code: int, start: str, end: str, timeout: int) -> bool:
    # coreutils `timeout -s KILL` dies with its own group (137), the python runner exits 124.
    if code not in (RUNTIME_TIMEOUT_EXIT, SIGKILLED_EXIT):
        return False
    try:
        elapsed = float(end) - float(start)
    except ValueError:
        return True  # no /proc/uptime: trust the exit code
    return elapsed >= timeout - 0.05


_RUNTIME_TIMED_OUT: Final = re.compile(r"timed out after ([0-9]+(?:\.[0-9]+)?) seconds\s*$")


def _runtime_failure(stdout: str, stderr: str, exit_code: int) -> CommandResult:
    # The wrapper did not run to completion: the runtime itself failed (its own
    # global timeout, exec failure). Report what it said; the exit code is unknown.
    message = (stderr or stdout).strip() or f"runtime exit code {exit_code}"
    if "timed out" in message:
        # The runtime killed the wrapper's process group at SANDBOX_EXEC_TIMEOUT_SECONDS
        # (the only timeout of a command whose timeout is at or above that limit): the
        # output captured so far dies with the wrapper. Its message repeats the whole
        # command line, so only the limit is kept.
        match = _RUNTIME_TIMED_OUT.search(message)
        after = f" after {float(match[1]):g} seconds" if match else ""
        return CommandResult(
            f"Error: command timed out{after}: the sandbox runtime killed the command at its own timeout"
            " (SANDBOX_EXEC_TIMEOUT_SECONDS); its output is lost.",
            RUNTIME_TIMEOUT_EXIT,
            False,
            True,
        )
    return CommandResult(f"Error: the sandbox runtime failed to run the command: {message}", None, False, False)


# ------------------------------------------------------------------- file operations

_UPLOAD_SCRIPT: Final = load_script("upload.sh")


def build_upload_finalize(items: Sequence[tuple[str, str, str]]) -> str:
    """Move staged uploads into place: items are (staging path, target, confine root)."""
    args = [arg for item in items for arg in item]
    return sh_command(_UPLOAD_SCRIPT, *args)


def parse_upload_finalize(stdout: str, count: int) -> list[str | None]:
    """One result per item: None on success, else an error code."""
    codes = [line[3:].strip() for line in stdout.splitlines() if line.startswith("@U ")]
    if len(codes) != count:
        raise MalformedResponse(f"upload finalize answered {len(codes)} of {count} items: {stdout[:200]!r}")
    return [None if code == "ok" else code for code in codes]


_DOWNLOAD_SCRIPT: Final = load_script("download.sh")


@dataclass(frozen=True)
class DownloadPrep:
    """Per-path answer of the download script: inline content, a staged file, or an error."""

    content: bytes | None = None
    staged: str | None = None  # file name inside the staging dir
    error: str | None = None


def build_download_prepare(
    items: Sequence[tuple[str, str]], *, staging_dir: str, token: str, inline_max: int, inline_budget: int
) -> str:
    args = [arg for item in items for arg in item]
    return sh_command(_DOWNLOAD_SCRIPT, staging_dir, token, str(inline_max), str(inline_budget), *args)


_STAGED_NAME: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}")


def parse_download_prepare(stdout: str, count: int) -> list[DownloadPrep]:
    results: list[DownloadPrep] = []
    current: list[str] | None = None  # base64 lines of the inline file being read

    def garbage(why: str) -> MalformedResponse:
        return MalformedResponse(f"download prepare answered {why}: {stdout[:200]!r}")

    def flush() -> None:
        if current is not None:
            try:
                results.append(DownloadPrep(content=base64.b64decode("".join(current), validate=True)))
            except ValueError as exc:  # binascii.Error, or not ASCII
                raise garbage("content that is not base64") from exc

    for line in stdout.splitlines():
        if line.startswith("@D! "):
            current = None
            results.append(DownloadPrep(error="read_error"))
        elif line.startswith("@D "):
            flush()
            current = None
            kind, _, rest = line[3:].partition(" ")
            if kind == "inline":
                current = []
            elif kind == "staged":
                name = rest.partition(" ")[2]
                # Only a plain name inside the staging directory: it is fetched and then removed.
                if not _STAGED_NAME.fullmatch(name):
                    raise garbage(f"a staged name that is not a plain file name ({name[:80]!r})")
                results.append(DownloadPrep(staged=name))
            else:
                results.append(DownloadPrep(error=kind))
        elif current is not None:
            current.append(line)
    flush()
    if len(results) != count:
        raise MalformedResponse(f"download prepare answered {len(results)} of {count} paths: {stdout[:200]!r}")
    return results


def build_remove(paths: Sequence[str]) -> str:
    """Remove staging files; absolute paths, so `rm` runs directly without a shell."""
    return runtime_command(["rm", "-f", *paths])


_DELETE_SCRIPT: Final = load_script("delete.sh")


def build_delete(path: str, confine: str) -> str:
    return sh_command(_DELETE_SCRIPT, path, confine)


_CONFINE_SCRIPT: Final = load_script("confine.sh")


def build_confine_check(path: str, confine: str) -> str:
    return sh_command(_CONFINE_SCRIPT, path, confine)


def parse_marker(stdout: str, marker: str) -> str:
    """The word after `marker` on the script's answer line (e.g. "@X ok" -> "ok")."""
    for line in stdout.splitlines():
        if line.startswith(marker + " "):
            return line[len(marker) + 1 :].strip()
    raise MalformedResponse(f"unexpected answer from the sandbox (no {marker} line): {stdout[:200]!r}")
