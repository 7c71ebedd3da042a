"""Shell scripts run through the runtime's `/execute`, with their builders and parsers.

The upstream python runtime shlex-splits the command and execs it without a
shell, in its base directory, with no stdin, and fails the whole request when the
output is not UTF-8. So every script here is run as `sh -c <script> lkc <args>`
(`sh` instead of `lkc` for the execute wrapper, whose user command sees it as $0):
the script text is constant and all data (paths, the user command) travels as
positional arguments, never interpolated into shell text. Paths are always
absolute, so no argument can be mistaken for an option. Scripts print only ASCII
protocol lines; anything that may carry arbitrary bytes is base64-encoded in the pod.

Everything here is pure (no I/O): `build_*` returns the runtime command string,
`parse_*` turns the runtime's stdout into results.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from .errors import SandboxError

STAGING_DIRNAME: Final = ".lkc-staging"
"""Directory under the runtime's base dir for capture files and upload/download staging."""

RUNTIME_TIMEOUT_EXIT: Final = 124
"""Exit code reported for a command killed at its timeout (as coreutils `timeout`)."""

RUNTIME_DEFAULT_LIMIT: Final = 300.0
"""The runtime's own per-command limit when SANDBOX_EXEC_TIMEOUT_SECONDS is unset or invalid."""

Runner = Literal["timeout", "python3", "none"]


def runtime_command(argv: Sequence[str]) -> str:
    """Quote argv so the runtime's `shlex.split` gives back exactly these strings."""
    return shlex.join(argv)


def sh_command(script: str, *args: str) -> str:
    """`sh -c <script>` with positional arguments; `$0` is the fixed word `lkc`."""
    return runtime_command(["sh", "-c", script, "lkc", *args])


# ----------------------------------------------------------------------------- probe

_PROBE_SCRIPT: Final = """d=$PWD/$1
mkdir -p "$d" 2>/dev/null
h=$HOSTNAME
[ -n "$h" ] || read -r h 2>/dev/null </proc/sys/kernel/hostname
echo @LKCP
echo "base=$PWD"
echo "host=$h"
if timeout -s KILL 5 true 2>/dev/null; then echo runner=timeout
elif command -v python3 >/dev/null 2>&1; then echo runner=python3
else echo runner=none; fi
command -v python3 >/dev/null 2>&1 && echo python3=1
command -v base64 >/dev/null 2>&1 && echo base64=1
[ -w "$d" ] && echo staging=1
if read -r s 2>/dev/null </proc/$$/stat; then
  s=${s##*) }
  (set -f; set -- $s; [ "$3" = $$ ] && [ "$4" = $$ ]) && echo group=1
fi
v=${SANDBOX_EXEC_TIMEOUT_SECONDS-300}
case $v in *[!0-9A-Za-z.+_-]*) echo "limit=?";; *) echo "limit=$v";; esac
find "$d" -type f -mmin +120 -delete 2>/dev/null
exit 0"""
# The probe runs once per (re)connection: it learns the base dir (the runtime's
# cwd), the pod's name (the pod runner sets HOSTNAME to it), how to enforce
# timeouts, and sweeps staging files that a broken connection left behind.
# `group=1`: the probe leads its own session and process group, as the runtime
# (v1.0+) starts every command so that it can kill the whole group at its own
# limit; `limit=` is that limit's raw setting, parsed below exactly as the
# runtime parses it (`?` when it holds anything but letters, digits and `.+_-`,
# e.g. a line break or blanks: then the limit is treated as unknown).


@dataclass(frozen=True)
class RuntimeInfo:
    """What the probe learned about the runtime at an endpoint."""

    base_dir: str
    hostname: str
    runner: Runner
    has_python3: bool
    staging_writable: bool
    has_base64: bool = True
    exec_limit: float | None = None
    """Seconds after which the runtime itself kills a command's whole process group
    (SANDBOX_EXEC_TIMEOUT_SECONDS, default 300); None when the runtime is not known to."""

    @property
    def staging_dir(self) -> str:
        return f"{self.base_dir.rstrip('/')}/{STAGING_DIRNAME}"

    def runner_for(self, timeout: int) -> Runner:
        """The in-pod watchdog a command with this timeout needs.

        "none" when the runtime's own kill comes first anyway (`timeout` at or above
        its limit: the default 300 s equals the runtime's default): the wrapper then
        spawns no watchdog and the runtime's kill is reported as the timeout, without
        the output (the runtime answers nothing but its error then; a watchdog set
        at that same limit would fire later, so this loses nothing).
        """
        if self.exec_limit is not None and timeout >= self.exec_limit:
            return "none"
        return self.runner


def build_probe() -> str:
    return sh_command(_PROBE_SCRIPT, STAGING_DIRNAME)


def parse_probe(stdout: str) -> RuntimeInfo:
    lines = stdout.splitlines()
    if not lines or lines[0] != "@LKCP":
        raise SandboxError(f"unexpected probe output from the runtime: {stdout[:200]!r}")
    fields = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
    base = fields.get("base", "")
    if not base.startswith("/"):
        raise SandboxError(f"runtime reported no usable base directory: {base!r}")
    runner = fields.get("runner", "none")
    return RuntimeInfo(
        base_dir=base,
        hostname=fields.get("host", ""),
        runner=runner if runner in ("timeout", "python3") else "none",  # type: ignore[arg-type]
        has_python3=fields.get("python3") == "1",
        staging_writable=fields.get("staging") == "1",
        has_base64=fields.get("base64") == "1",
        exec_limit=_exec_limit(fields.get("limit")) if fields.get("group") == "1" else None,
    )


def _exec_limit(raw: str | None) -> float | None:
    """SANDBOX_EXEC_TIMEOUT_SECONDS as the runtime reads it: 300 unless a finite number > 0."""
    if raw is None or raw == "?":
        return None
    try:
        value = float(raw)
    except ValueError:
        return RUNTIME_DEFAULT_LIMIT
    return value if math.isfinite(value) and value > 0 else RUNTIME_DEFAULT_LIMIT


# --------------------------------------------------------------------- user commands

# Fallback when the image has no usable `timeout`: a new session killed as a group.
_PY_TIMEOUT: Final = (
    "import os,subprocess as s,sys\n"
    'p=s.Popen(["sh","-c",sys.argv[2]],start_new_session=True)\n'
    "try:r=p.wait(float(sys.argv[1]))\n"
    "except s.TimeoutExpired:os.killpg(p.pid,9);p.wait();r=124\n"
    "sys.exit(r if r>=0 else 128-r)"
)

_WATCHDOGS: Final[dict[str, str]] = {
    "timeout": 'timeout -s KILL "$1" sh -c "$4"',
    "python3": "python3 -S -c '" + _PY_TIMEOUT + '\' "$1" "$4"',
}

# Images without coreutils/BusyBox `base64` encode with python3 instead.
_PY_BASE64: Final = (
    "python3 -S -c 'import base64,sys;sys.stdout.write(base64.b64encode(sys.stdin.buffer.read()).decode())'"
)

# $0 sh, $1 timeout s, $2 capture byte cap (max+1), $3 staging dir, $4 command, $5 cwd ("" = base).
#
# Every process costs about as much as the whole bare `sh -c true` request, so the
# wrapper spawns as few as it can: `rm` always, `head | base64` only for output.
# The output goes to a capture file (so the real exit code survives and any bytes
# can be base64-encoded afterwards), opened on fd 3 for the command and fd 4 for
# reading back, then unlinked before the command can outlive the wrapper: a
# killed wrapper (the runtime's own timeout) leaves nothing behind. `command exec`
# reports a failed redirect instead of exiting the shell; the command gets neither
# descriptor. `[ -s /dev/fd/4 ]` tells an empty capture without a process (when
# /dev/fd is missing, the output is always encoded). The wrapper's own tools run
# with LC_ALL=C: loading a UTF-8 locale (python images set LANG=C.UTF-8) costs
# each of them about a third of its start-up; the user's command keeps its locale.
_CAPTURE: Final = """if [ -n "$5" ] && ! cd "$5" 2>/dev/null && ! { mkdir -p "$5" 2>/dev/null && cd "$5"; }; then
  echo "@LKC! cwd"; exit 0
fi
[ -d "$3" ] || mkdir -p "$3" 2>/dev/null
if ! { command exec 3>"$3/o.$$" 4<"$3/o.$$"; } 2>/dev/null; then
  rm -f "$3/o.$$" 2>/dev/null; echo "@LKC! capture"; exit 0
fi
"""
_ENCODE: Final = """if [ -s /dev/fd/4 ] || ! [ -e /dev/fd/4 ]; then LC_ALL=C head -c "$2" <&4 | ENCODER; fi
"""

# With a watchdog (the call's timeout is below the runtime's own limit): `rm` runs
# while the command starts. /proc/uptime gives the elapsed time without spawning
# a process, to tell a timeout kill from exit 137. `& wait` keeps dash's "Killed"
# job notice out of the captured output.
_WATCHDOG_TEMPLATE: Final = (
    _CAPTURE
    + """read -r a x 2>/dev/null </proc/uptime
RUNNER >&3 2>&1 </dev/null 3>&- 4<&- &
LC_ALL=C rm -f "$3/o.$$"
wait $!
e=$?
read -r b x 2>/dev/null </proc/uptime
echo "@LKC $e ${a:--} ${b:--}"
"""
    + _ENCODE
)

# Without a watchdog (the runtime kills the whole process group at its limit
# first): the command runs in a subshell of the wrapper, a fork without any exec,
# `eval`ed after `set --`, so it sees what `sh -c` would give it: $0 `sh`, no
# positional parameters, no wrapper variables (none is set before), no stdin. A
# subshell keeps `exit`, `set -e`, traps and `cd` to itself. The wrapper traps the
# catchable signals (its children get the default actions back), so a command
# that signals its whole process group (`kill 0`) is reported, not lost.
_DIRECT_TEMPLATE: Final = (
    "trap : HUP INT QUIT TERM USR1 USR2 ALRM\n"
    + _CAPTURE
    + """LC_ALL=C rm -f "$3/o.$$"
RUNNER >&3 2>&1 </dev/null 3>&- 4<&-
echo "@LKC $? - -"
"""
    + _ENCODE
)
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


def build_user_command(
    command: str,
    *,
    timeout: int,
    max_output: int,
    staging_dir: str,
    cwd: str,
    runner: Runner,
    has_base64: bool = True,
) -> str:
    """Wrap a user command: combined output capped at `max_output` bytes, any bytes kept.

    `runner` is the in-pod watchdog that enforces `timeout` ("none": no watchdog
    process, see `RuntimeInfo.runner_for`).
    """
    encoder = "LC_ALL=C base64" if has_base64 else _PY_BASE64
    if runner == "none":
        run = _OWN_SHELL if needs_own_shell(command) else _SUBSHELL
        script = _DIRECT_TEMPLATE.replace("RUNNER", run)
    else:
        script = _WATCHDOG_TEMPLATE.replace("RUNNER", _WATCHDOGS[runner])
    script = script.replace("ENCODER", encoder)
    return runtime_command(["sh", "-c", script, "sh", str(timeout), str(max_output + 1), staging_dir, command, cwd])


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
    if stdout.startswith("@LKC! "):
        what = stdout[6:].strip()
        detail = {
            "capture": "cannot create the output capture file in the staging directory",
            "cwd": "cannot enter the working directory",
        }.get(what, what)
        return CommandResult(f"Error: sandbox wrapper failed: {detail}", None, False, False)
    head, _, body = stdout.partition("\n")
    fields = head.split(" ")
    if fields[0] != "@LKC" or len(fields) != 4:
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
    return CommandResult(text, code, truncated, timed_out)


def _killed_at_deadline(code: int, start: str, end: str, timeout: int) -> bool:
    # coreutils `timeout -s KILL` dies with its own group (137), the python runner exits 124.
    if code not in (RUNTIME_TIMEOUT_EXIT, 128 + 9):
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

# Shared helpers (builtins only, so they cost no process):
#   why P      classify a missing path by its deepest existing ancestor
#   phys P     set PH to P with symlinks resolved (P may not exist yet)
#   inside P R succeed when P is R or below it
_PRELUDE: Final = """exec 2>/dev/null
why() { w=$1; while :; do w=${w%/*}; [ -n "$w" ] || { echo file_not_found; return; }
if [ -e "$w" ]; then
if [ ! -d "$w" ]; then echo invalid_path; elif [ -x "$w" ]; then echo file_not_found; else echo permission_denied; fi
return; fi; done; }
phys() { q=$1; r=; while [ ! -d "$q" ]; do r=/${q##*/}$r; q=${q%/*}; [ -n "$q" ] || q=/; done
cd -P "$q" || return 1; q=$PWD; [ "$q" = / ] && q=; PH=$q$r; }
inside() { case "$1/" in "$2"/*) return 0;; esac; return 1; }
"""

# Arguments: triples (staging file, target, confinement root or "").
_UPLOAD_SCRIPT: Final = (
    _PRELUDE
    + """up() {
if [ ! -f "$1" ]; then echo "@U upload_lost"; return; fi
if [ -d "$2" ]; then echo "@U is_directory"; return; fi
if [ -p "$2" ]; then echo "@U invalid_path"; return; fi
if [ -n "$3" ]; then
  if [ -L "$2" ]; then echo "@U invalid_path"; return; fi
  phys "$2" || { echo "@U invalid_path"; return; }; t=$PH
  phys "$3" || { echo "@U invalid_path"; return; }
  inside "$t" "$PH" || { echo "@U invalid_path"; return; }
fi
p=${2%/*}; [ -n "$p" ] || p=/
if [ ! -d "$p" ]; then
  c=$(why "$2"); [ "$c" = file_not_found ] || { echo "@U $c"; return; }
  mkdir -p "$p" || { echo "@U permission_denied"; return; }
fi
cat "$1" >"$2" || { echo "@U permission_denied"; return; }
echo "@U ok"; }
while [ $# -ge 3 ]; do up "$1" "$2" "$3"; rm -f "$1"; shift 3; done"""
)
# `cat >` (not mv) writes through the existing inode, so a file keeps its mode and
# owner on overwrite like any write would; a symlink target is refused when
# confined (O_NOFOLLOW-like), a FIFO always (it would block).


def build_upload_finalize(items: Sequence[tuple[str, str, str]]) -> str:
    """Move staged uploads into place: items are (staging path, target, confine root)."""
    args = [arg for item in items for arg in item]
    return sh_command(_UPLOAD_SCRIPT, *args)


def parse_upload_finalize(stdout: str, count: int) -> list[str | None]:
    """One result per item: None on success, else an error code."""
    codes = [line[3:].strip() for line in stdout.splitlines() if line.startswith("@U ")]
    if len(codes) != count:
        raise SandboxError(f"upload finalize answered {len(codes)} of {count} items: {stdout[:200]!r}")
    return [None if code == "ok" else code for code in codes]


# Arguments: staging dir, token, inline max bytes, inline budget, then pairs
# (target, confinement root or ""). Small files come back inline as base64 (one
# round trip); bigger ones are hard-linked (else copied) into staging for GET
# /download, which only serves files under the base dir.
_DOWNLOAD_SCRIPT: Final = (
    _PRELUDE
    + """d=$1 k=$2 im=$3 bu=$4; shift 4; i=0; tot=0
dn() {
i=$((i+1))
if [ -n "$2" ]; then
  if [ -L "$1" ]; then f=$(readlink -f "$1") && [ -n "$f" ] || { echo "@D file_not_found"; return; }
  else phys "$1" || { echo "@D invalid_path"; return; }; f=$PH; fi
  phys "$2" || { echo "@D invalid_path"; return; }
  inside "$f" "$PH" || { echo "@D invalid_path"; return; }
fi
if [ -d "$1" ]; then echo "@D is_directory"; return; fi
if [ ! -e "$1" ]; then echo "@D $(why "$1")"; return; fi
if [ ! -f "$1" ]; then echo "@D invalid_path"; return; fi
if [ ! -r "$1" ]; then echo "@D permission_denied"; return; fi
n=$(wc -c <"$1") || { echo "@D permission_denied"; return; }
n=$((n+0))
if [ "$n" -le "$im" ] && [ $((tot+n)) -le "$bu" ]; then
  tot=$((tot+n)); echo "@D inline $n"; base64 <"$1" || echo "@D! read"
else
  s=$d/dn-$k-$i
  if [ -L "$1" ] || ! ln "$1" "$s"; then cat "$1" >"$s" || { rm -f "$s"; echo "@D permission_denied"; return; }; fi
  echo "@D staged $n ${s##*/}"
fi; }
while [ $# -ge 2 ]; do dn "$1" "$2"; shift 2; done"""
)


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


def parse_download_prepare(stdout: str, count: int) -> list[DownloadPrep]:
    results: list[DownloadPrep] = []
    current: list[str] | None = None  # base64 lines of the inline file being read

    def flush() -> None:
        if current is not None:
            results.append(DownloadPrep(content=base64.b64decode("".join(current))))

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
                results.append(DownloadPrep(staged=rest.split(" ", 1)[1]))
            else:
                results.append(DownloadPrep(error=kind))
        elif current is not None:
            current.append(line)
    flush()
    if len(results) != count:
        raise SandboxError(f"download prepare answered {len(results)} of {count} paths: {stdout[:200]!r}")
    return results


def build_remove(paths: Sequence[str]) -> str:
    """Remove staging files; absolute paths, so `rm` runs directly without a shell."""
    return runtime_command(["rm", "-f", *paths])


# Arguments: target, confinement root or "". The symlink itself is what `rm`
# removes, so confinement checks the link's own location, not its target.
_DELETE_SCRIPT: Final = (
    _PRELUDE
    + """if [ -n "$2" ]; then
  p=${1%/*}; [ -n "$p" ] || p=/
  phys "$p" || { echo "@X invalid_path"; exit 0; }; t=$PH/${1##*/}
  phys "$2" || { echo "@X invalid_path"; exit 0; }
  inside "$t" "$PH" || { echo "@X invalid_path"; exit 0; }
fi
[ -e "$1" ] || [ -L "$1" ] || { echo "@X $(why "$1")"; exit 0; }
if rm -rf "$1"; then echo "@X ok"; else echo "@X permission_denied"; fi"""
)


def build_delete(path: str, confine: str) -> str:
    return sh_command(_DELETE_SCRIPT, path, confine)


# Arguments: path, confinement root. Used before reads that run deepagents' own
# scripts (read, glob) in virtual mode, to refuse symlinks leading out of the root.
_CONFINE_SCRIPT: Final = (
    _PRELUDE
    + """if [ -L "$1" ]; then f=$(readlink -f "$1") || f=; [ -n "$f" ] || { echo "@C ok"; exit 0; }
else phys "$1" || { echo "@C invalid_path"; exit 0; }; f=$PH; fi
phys "$2" || { echo "@C invalid_path"; exit 0; }
if inside "$f" "$PH"; then echo "@C ok"; else echo "@C invalid_path"; fi"""
)


def build_confine_check(path: str, confine: str) -> str:
    return sh_command(_CONFINE_SCRIPT, path, confine)


def parse_marker(stdout: str, marker: str) -> str:
    """The word after `marker` on the script's answer line (e.g. "@X ok" -> "ok")."""
    for line in stdout.splitlines():
        if line.startswith(marker + " "):
            return line[len(marker) + 1 :].strip()
    raise SandboxError(f"unexpected answer from the sandbox (no {marker} line): {stdout[:200]!r}")
