"""Shell scripts: quoting, parsing, and their behaviour when run locally under dash and bash.

The scripts are executed exactly as the runtime would (shlex.split, no shell,
strict UTF-8 decoding of the output), just without HTTP.
"""

from __future__ import annotations

import atexit
import base64
import functools
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from langchain_k8s_client import commands, probe
from langchain_k8s_client.errors import SandboxError

SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]


def run_like_runtime(
    command: str, cwd: Path, shell: str = "sh", env: dict[str, str] | None = None
) -> tuple[str, str, int]:
    argv = shlex.split(command)
    if argv[0] == "sh" and shell != "sh":
        argv[0] = shell
        # Inner `sh -c` (under the watchdog) runs the same shell, as in an image whose sh it is.
        env = dict(env or os.environ)
        env["PATH"] = f"{_sh_is(shell)}:{env.get('PATH', '/usr/bin:/bin')}"
    # As the runtime: a new session, so that the process group can be killed as a whole.
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=60, check=False, env=env, start_new_session=True)
    # The runtime decodes with text=True: anything not UTF-8 would fail the request.
    return proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8"), proc.returncode


@functools.cache
def _sh_is(shell: str) -> str:
    """A directory whose `sh` is `shell` (removed at exit)."""
    directory = tempfile.mkdtemp(prefix=f"lkc-sh-{shell}-")
    atexit.register(shutil.rmtree, directory, True)
    found = shutil.which(shell)
    assert found
    os.symlink(found, f"{directory}/sh")
    return directory


def wrap(
    command: str,
    staging: Path,
    *,
    timeout: int = 30,
    max_output: int = 1000,
    cwd: str = "",
    has_base64: bool = True,
    runner: probe.Runner = "timeout",
) -> str:
    return commands.build_user_command(
        command,
        timeout=timeout,
        max_output=max_output,
        staging_dir=str(staging),
        cwd=cwd,
        runner=runner,
        has_base64=has_base64,
    )


def execute_locally(command: str, tmp_path: Path, shell: str = "sh", **kwargs: object) -> commands.CommandResult:
    staging = tmp_path / "stage"
    stdout, stderr, code = run_like_runtime(wrap(command, staging, **kwargs), tmp_path, shell)  # type: ignore[arg-type]
    return commands.parse_user_command(
        stdout,
        stderr,
        code,
        timeout=int(kwargs.get("timeout", 30)),  # type: ignore[call-overload]
        max_output=int(kwargs.get("max_output", 1000)),  # type: ignore[call-overload]
        runner=kwargs.get("runner", "timeout"),  # type: ignore[arg-type]
    )


# ----------------------------------------------------------------------------- building


def test_user_command_travels_as_one_argument() -> None:
    nasty = "echo '$(x)' \"`y`\"\n\t; exit 3 # \\ '\"'"
    argv = shlex.split(wrap(nasty, Path("/st age"), timeout=7, max_output=10, cwd="/w d"))
    assert argv[:2] == ["sh", "-c"]
    assert argv[3:] == ["sh", "7", "11", "/st age", nasty, "/w d", "o", "1", ""]  # $0 is `sh`, as under `sh -c`
    assert nasty not in argv[2]  # never interpolated into the script text
    direct = shlex.split(wrap(nasty, Path("/s"), runner="none"))
    assert direct[4:] == ["30", "1001", "/s", nasty, "", "o", "1", ""] and nasty not in direct[2]


@pytest.mark.parametrize(
    ("runner", "command", "needle"),
    [
        ("timeout", "x", 'timeout -s KILL "$1" sh -c "$4"'),
        ("python3", "x", "python3 -S -c"),
        ("none", "x", 'eval "$4" >&3'),  # a plain command: in the wrapper shell itself
        ("none", "x; y", '( eval "set --;$4" )'),
        ("none", "kill $$", '(exec sh -c "$4")'),
        ("none", "echo ${$}", '(exec sh -c "$4")'),
        ("none", "kill $PPID", '(exec sh -c "$4")'),
        ("none", "echo $LINENO", '(exec sh -c "$4")'),
    ],
)
def test_runner_variants(runner: str, command: str, needle: str) -> None:
    script = shlex.split(
        commands.build_user_command(command, timeout=1, max_output=1, staging_dir="/s", cwd="", runner=runner)  # type: ignore[arg-type]
    )[2]
    assert needle in script
    assert ("timeout" in script or "python3 -S -c 'import os" in script) is (runner != "none")


def test_runner_for_skips_the_watchdog_only_under_a_known_runtime_limit() -> None:
    info = probe.RuntimeInfo("/app", "p", "timeout", exec_limit=300.0)
    assert [info.runner_for(t) for t in (1, 299, 300, 3600)] == ["timeout", "timeout", "none", "none"]
    fractional = probe.RuntimeInfo("/app", "p", "python3", exec_limit=2.5)
    assert [fractional.runner_for(t) for t in (2, 3)] == ["python3", "none"]
    unknown = probe.RuntimeInfo("/app", "p", "timeout")
    assert unknown.runner_for(3600) == "timeout"


def test_internal_commands_quote_every_path() -> None:
    items = [("/s/up-1", "/a b/$(c)", ""), ("/s/up-2", "/x\ny", "/x")]
    argv = shlex.split(commands.build_upload_finalize(items))
    assert argv[3:] == ["lkc", "/s/up-1", "/a b/$(c)", "", "/s/up-2", "/x\ny", "/x"]
    assert shlex.split(commands.build_remove(["/s/a b"])) == ["rm", "-f", "/s/a b"]


# ------------------------------------------------------------------------------ parsing


def test_parse_plain_result() -> None:
    stdout = "@LKC 3 10.00 10.20\n" + base64.encodebytes(b"hello\n").decode()
    result = commands.parse_user_command(stdout, "", 0, timeout=30, max_output=100, runner="timeout")
    assert result == commands.CommandResult("hello\n", 3, False, False)


def test_parse_non_utf8_and_truncation() -> None:
    raw = b"\xff\xfeabc" + b"x" * 20
    stdout = "@LKC 0 - -\n" + base64.encodebytes(raw[:11]).decode()
    result = commands.parse_user_command(stdout, "", 0, timeout=30, max_output=10, runner="timeout")
    assert result.output == "\ufffd\ufffdabcxxxxx"
    assert result.truncated is True


@pytest.mark.parametrize(
    ("code", "start", "end", "runner", "timed_out"),
    [
        (137, "100.00", "102.00", "timeout", True),
        (124, "100.00", "102.01", "python3", True),
        (137, "100.00", "100.30", "timeout", False),  # killed by something else, early
        (1, "100.00", "105.00", "timeout", False),
        (137, "-", "-", "timeout", True),  # no /proc/uptime: trust the code
        (137, "100.00", "102.00", "none", False),  # no in-pod timeout: never ours
    ],
)
def test_timeout_detection(code: int, start: str, end: str, runner: str, timed_out: bool) -> None:
    stdout = f"@LKC {code} {start} {end}\n"
    result = commands.parse_user_command(stdout, "", 0, timeout=2, max_output=10, runner=runner)  # type: ignore[arg-type]
    assert result.timed_out is timed_out
    assert result.exit_code == (124 if timed_out else code)
    assert ("timed out after 2 seconds" in result.output) is timed_out
    assert ("out of memory (OOM) killer" in result.output) is (code == 137 and not timed_out)


def test_a_sigkill_before_the_timeout_names_the_oom_killer() -> None:
    """A command the OOM killer killed: exit 137, no output of its own (the shell says nothing):
    the result says what most likely happened, after whatever the command printed first."""
    silent = commands.parse_user_command(
        "@LKC 137 100.00 101.50\n", "", 0, timeout=60, max_output=100, runner="timeout"
    )
    assert silent.exit_code == 137 and not silent.timed_out
    assert silent.output == commands.SIGKILLED_NOTE
    assert "memory limit" in silent.output and "137" in silent.output
    printed = "@LKC 137 - -\n" + base64.encodebytes(b"allocating\n").decode()
    direct = commands.parse_user_command(printed, "", 0, timeout=60, max_output=100, runner="none")
    assert direct.output == "allocating\n\n" + commands.SIGKILLED_NOTE and direct.exit_code == 137
    plain = commands.parse_user_command("@LKC 9 - -\n", "", 0, timeout=60, max_output=100, runner="timeout")
    assert plain.output == ""  # exit 9 is a command's own code, not a signal


def test_parse_runtime_failures() -> None:
    timeout = commands.parse_user_command(
        "",
        "Failed to execute command: Command '['sh', '-c', '...']' timed out after 300.0 seconds",
        1,
        timeout=600,
        max_output=10,
        runner="timeout",
    )
    assert (timeout.exit_code, timeout.timed_out, timeout.truncated) == (124, True, False)
    assert timeout.output.startswith("Error: command timed out after 300 seconds: the sandbox runtime killed")
    assert "'sh', '-c'" not in timeout.output  # the runtime's message repeats the whole command line
    odd = commands.parse_user_command("", "gateway: upstream timed out", 1, timeout=9, max_output=1, runner="none")
    assert (odd.exit_code, odd.timed_out) == (124, True)
    broken = commands.parse_user_command(
        "",
        "Failed to execute command: [Errno 2] No such file or directory: 'sh'",
        1,
        timeout=600,
        max_output=10,
        runner="timeout",
    )
    assert broken.exit_code is None
    assert "No such file or directory: 'sh'" in broken.output
    capture = commands.parse_user_command("@LKC! capture\n", "", 0, timeout=1, max_output=1, runner="timeout")
    assert capture.exit_code is None and "capture file" in capture.output


def test_parse_probe() -> None:
    info = probe.parse_probe("@LKCP\nbase=/app\nhost=pod-1\nrunner=python3\npython3=1\n")
    assert info == probe.RuntimeInfo("/app", "pod-1", "python3", has_base64=False)
    assert info.exec_limit is None
    assert info.staging_dir == f"/app/{probe.STAGING_DIRNAME}"
    assert probe.parse_probe("@LKCP\nbase=/a\nrunner=weird\n").runner == "none"
    for bad in ("", "hello", "@LKCP\nbase=relative\n"):
        with pytest.raises(SandboxError):
            probe.parse_probe(bad)


@pytest.mark.parametrize(
    ("lines", "limit"),
    [
        ("group=1\nlimit=300", 300.0),
        ("group=1\nlimit=2.5", 2.5),
        ("group=1\nlimit=1_0", 10.0),  # as float() reads it
        ("group=1\nlimit=", 300.0),  # the runtime falls back to its default
        ("group=1\nlimit=abc", 300.0),
        ("group=1\nlimit=-5", 300.0),
        ("group=1\nlimit=inf", 300.0),
        ("group=1\nlimit=nan", 300.0),
        ("group=1\nlimit=?", None),  # not safely printable: unknown
        ("group=1", None),
        ("limit=300", None),  # not a session leader: an older runtime that never kills
    ],
)
def test_parse_probe_runtime_limit(lines: str, limit: float | None) -> None:
    assert probe.parse_probe(f"@LKCP\nbase=/app\n{lines}\n").exec_limit == limit


def test_parse_counts_must_match() -> None:
    with pytest.raises(SandboxError):
        commands.parse_upload_finalize("@U ok\n", 2)
    with pytest.raises(SandboxError):
        commands.parse_download_prepare("@D file_not_found\n", 2)
    with pytest.raises(SandboxError):
        commands.parse_marker("nothing", "@X")


def test_parse_download_prepare_mixed() -> None:
    stdout = (
        "@D inline 3\n"
        + base64.encodebytes(b"abc").decode()
        + "@D staged 99 dn-t-2\n@D is_directory\n@D inline 0\n@D inline 5\nYWJj\n@D! read\n"
    )
    preps = commands.parse_download_prepare(stdout, 5)
    assert preps == [
        commands.DownloadPrep(content=b"abc"),
        commands.DownloadPrep(staged="dn-t-2"),
        commands.DownloadPrep(error="is_directory"),
        commands.DownloadPrep(content=b""),
        commands.DownloadPrep(error="read_error"),
    ]


# ------------------------------------------------------------------- running the scripts


RUNNERS = ["timeout", "none"]  # with the in-pod watchdog, and without (the runtime's limit applies)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("shell", SHELLS)
def test_wrapper_keeps_order_exit_code_and_bytes(tmp_path: Path, shell: str, runner: str) -> None:
    result = execute_locally(r"echo out; echo err >&2; printf '\377\000'; exit 9", tmp_path, shell, runner=runner)
    assert result.output == "out\nerr\n\ufffd\x00"
    assert result.exit_code == 9
    assert _capture_sizes(tmp_path / "stage") == [0]  # emptied once read (no `rm` per call)


@pytest.mark.parametrize("runner", RUNNERS)
def test_wrapper_empty_output_and_no_content_left(tmp_path: Path, runner: str) -> None:
    for _ in range(3):
        assert execute_locally("true", tmp_path, runner=runner) == commands.CommandResult("", 0, False, False)
    assert set(_capture_sizes(tmp_path / "stage")) == {0}  # empty files, until a sweeping call


# What a user command sees must not depend on running in the wrapper's subshell
# (runner "none") rather than in its own `sh -c` (under the watchdog).
SHELL_SEMANTICS = [
    ("exit 7", "", 7),
    ("echo a; exit 7; echo b", "a\n", 7),
    ("set -e; false; echo not reached", "", 1),
    ("cd /; pwd; cd /tmp", "/\n", 0),
    ("trap 'echo bye' EXIT; echo hi", "hi\nbye\n", 0),
    ("trap 'echo got TERM; exit 3' TERM; kill -TERM $$; echo after", "got TERM\n", 3),
    ("cat; read line || echo eof", "eof\n", 0),
    ('echo "$0|$#|$*|${o-}${e-}${a-}${x-}${s-}${v-}"', "sh|0||\n", 0),
    ("shift; echo shifted", None, None),  # dash: a special builtin's error ends the shell
    ("exec 2>&1; echo to-stderr >&2", "to-stderr\n", 0),
    ("sh -c 'exit 4'", "", 4),
    ("kill -9 $$", commands.SIGKILLED_NOTE, 137),
    ("echo before; kill 0; echo after", "before\n", 143),  # the whole process group
    ("f() { return 5; }; f", "", 5),
    ("ls /proc/self/fd", "0\n1\n2\n3\n", 0),  # no wrapper descriptor leaks into commands
    ("echo 'unterminated", None, 2),  # a syntax error, reported by sh
    ("if", None, 2),
    ("nosuchcommand-lkc", None, 127),
]


@pytest.mark.parametrize(("command", "output", "code"), SHELL_SEMANTICS)
@pytest.mark.parametrize("shell", SHELLS)
def test_wrapper_shell_semantics(
    tmp_path: Path, shell: str, command: str, output: str | None, code: int | None
) -> None:
    watched = execute_locally(command, tmp_path, shell, runner="timeout")
    direct = execute_locally(command, tmp_path, shell, runner="none")
    assert direct.exit_code == watched.exit_code
    if code is not None:
        assert direct.exit_code == code
    if output is not None:
        assert direct.output == watched.output == output
    assert set(_capture_sizes(tmp_path / "stage")) <= {0}


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize(("command", "output", "code"), SHELL_SEMANTICS)
@pytest.mark.parametrize("shell", [s for s in SHELLS if s == "dash"])  # the probe stages wrappers for dash only
def test_a_staged_wrapper_answers_as_the_inline_one(
    tmp_path: Path, shell: str, command: str, output: str | None, code: int | None, runner: probe.Runner
) -> None:
    """`sh -c '. ./.lkc-staging/w-...sh' sh args`: the same answer, `$0` and error messages included, as
    the script inline (bash would name the sourced file in its messages: there the script goes inline)."""
    staging = tmp_path / probe.STAGING_DIRNAME
    options = {"timeout": 30, "max_output": 1000, "staging_dir": str(staging), "cwd": "", "runner": runner}
    inline = commands.user_command(command, seq=1, **options)  # type: ignore[arg-type]
    staged = commands.user_command(command, seq=2, **options)  # type: ignore[arg-type]
    staging.mkdir()
    (staging / staged.wrapper).write_text(staged.script)
    answers = []
    for wrapped_command in (inline.inline(), staged.staged()):
        stdout, stderr, exit_code = run_like_runtime(wrapped_command, tmp_path, shell)
        answers.append(
            commands.parse_user_command(stdout, stderr, exit_code, timeout=30, max_output=1000, runner=runner)
        )
    assert answers[0] == answers[1]
    if output is not None:
        assert answers[1].output == output


@pytest.mark.parametrize("shell", [s for s in SHELLS if s == "dash"])  # the probe stages wrappers for dash only
def test_a_missing_staged_wrapper_is_recognised(tmp_path: Path, shell: str) -> None:
    wrapped = commands.user_command(
        "echo hi", timeout=30, max_output=1000, staging_dir=str(tmp_path / "s"), cwd="", runner="none"
    )
    stdout, stderr, exit_code = run_like_runtime(wrapped.staged(), tmp_path, shell)
    assert commands.wrapper_missing(stdout, stderr, exit_code, wrapped.wrapper)
    (tmp_path / probe.STAGING_DIRNAME).mkdir()
    (tmp_path / probe.STAGING_DIRNAME / wrapped.wrapper).write_text(wrapped.script)
    stdout, stderr, exit_code = run_like_runtime(wrapped.staged(), tmp_path, shell)
    assert not commands.wrapper_missing(stdout, stderr, exit_code, wrapped.wrapper)
    assert stdout.startswith("@LKC 0 ")


def test_a_runtime_error_naming_the_wrapper_is_not_a_missing_wrapper() -> None:
    """The runtime's timeout message repeats the command line: the command ran, it must not go again."""
    wrapped = commands.user_command("sleep 9", timeout=2, max_output=10, staging_dir="/s", cwd="", runner="none")
    argv = shlex.split(wrapped.staged())
    stderr = f"Failed to execute command: Command '{argv}' timed out after 2 seconds"
    assert not commands.wrapper_missing("", stderr, 1, wrapped.wrapper)
    assert not commands.wrapper_missing(
        "", f"sh: 1: .: cannot open ./{probe.STAGING_DIRNAME}/other.sh: x", 2, wrapped.wrapper
    )


def test_a_wrapper_is_named_by_its_script_alone() -> None:
    options = {"timeout": 30, "max_output": 1000, "staging_dir": "/s", "cwd": ""}
    a = commands.user_command("ls /a", runner="none", **options)  # type: ignore[arg-type]
    b = commands.user_command("ls /b", runner="none", seq=7, sweep=32, **options)  # type: ignore[arg-type]
    c = commands.user_command("ls /a; ls /b", runner="none", **options)  # type: ignore[arg-type]
    assert a.wrapper == b.wrapper != c.wrapper
    assert a.wrapper.startswith("w-") and a.wrapper.endswith(".sh")
    assert len(a.staged()) < 150 < 600 < len(a.inline())


@pytest.mark.parametrize("shell", SHELLS)
def test_wrapper_adds_no_ignored_signals(tmp_path: Path, shell: str) -> None:
    """The wrapper's own traps never reach the command: it ignores exactly what a plain `sh -c` would
    (which depends on how this test process was started: nohup, a background job, ...)."""
    probe = "grep SigIgn /proc/self/status"
    baseline, _, _ = run_like_runtime(f"sh -c {shlex.quote(probe)}", tmp_path, shell)
    assert execute_locally(probe, tmp_path, shell, runner="none").output == baseline


@pytest.mark.parametrize("runner", RUNNERS)
def test_wrapper_tools_do_not_change_the_commands_locale(tmp_path: Path, runner: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LC_ALL"} | {"LANG": "C.UTF-8"}
    command = wrap('echo "$LANG|${LC_ALL-unset}"', tmp_path / "stage", runner=runner)  # type: ignore[arg-type]
    stdout, _, _ = run_like_runtime(command, tmp_path, env=env)
    result = commands.parse_user_command(stdout, "", 0, timeout=30, max_output=1000, runner=runner)  # type: ignore[arg-type]
    assert result.output == "C.UTF-8|unset\n"


def test_wrapper_cd_does_not_leak_between_commands(tmp_path: Path) -> None:
    workdir = tmp_path / "w"
    for runner in RUNNERS:
        execute_locally("cd /; export X=1", tmp_path, runner=runner, cwd=str(workdir))
        result = execute_locally('pwd; echo "${X-unset}"', tmp_path, runner=runner, cwd=str(workdir))
        assert result.output == f"{workdir}\nunset\n"


def test_wrapper_survives_a_command_that_signals_its_process_group(tmp_path: Path) -> None:
    # Without a watchdog the command shares the wrapper's process group.
    result = execute_locally("echo before; kill 0; echo after", tmp_path, runner="none")
    assert (result.output, result.exit_code) == ("before\n", 143)
    assert set(_capture_sizes(tmp_path / "stage")) == {0}


def _capture_sizes(staging: Path) -> list[int]:
    return [p.stat().st_size for p in staging.iterdir()]


def test_a_sweeping_call_removes_the_clients_capture_files(tmp_path: Path) -> None:
    # The runtime kills the wrapper's whole process group at its own limit: its capture stays.
    staging = tmp_path / "stage"
    marker = tmp_path / "started"
    killed = commands.build_user_command(
        f"echo partial; : >'{marker}'; sleep 30",
        timeout=30,
        max_output=1000,
        staging_dir=str(staging),
        cwd="",
        runner="none",
        capture="o.me",
        seq=3,
    )
    proc = subprocess.Popen(shlex.split(killed), cwd=tmp_path, stdout=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not marker.exists():
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        os.killpg(proc.pid, 9)
        proc.communicate(timeout=10)
    other = staging / "o.other.1"
    other.write_text("another client's")
    assert sorted(os.listdir(staging)) == ["o.me.3", "o.other.1"]

    def sweep_at(seq: int) -> None:
        command = commands.build_user_command(
            "echo hi",
            timeout=30,
            max_output=1000,
            staging_dir=str(staging),
            cwd="",
            runner="none",
            capture="o.me",
            seq=seq,
            sweep=4,
        )
        stdout, _, _ = run_like_runtime(command, tmp_path)
        assert stdout.startswith("@LKC 0 ")

    def left_eventually(expected: set[str]) -> None:
        deadline = time.monotonic() + 10  # the sweep runs in the background, after the answer
        while set(os.listdir(staging)) != expected:
            assert time.monotonic() < deadline, sorted(os.listdir(staging))
            time.sleep(0.01)

    # Call 5 sweeps calls -3 to 0 (none) and creates the files of calls 6 to 13, empty.
    sweep_at(5)
    left_eventually({"o.other.1", "o.me.3", "o.me.5"} | {f"o.me.{n}" for n in range(6, 14)})
    assert {(staging / f"o.me.{n}").stat().st_size for n in range(5, 14)} == {0}
    # Call 9 removes calls 1 to 4 (the killed wrapper's file with them) and creates up to 17.
    sweep_at(9)
    left_eventually({"o.other.1", "o.me.5"} | {f"o.me.{n}" for n in range(6, 18)})


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    "command",
    ["true", "false", "echo hi", "pwd", "cd /", "ls -d /", "nonexistent-command-lkc", "[ -d / ]", "printf a%sb x"],
)
def test_plain_commands_in_place_answer_as_sh_c(tmp_path: Path, shell: str, command: str) -> None:
    assert commands.runs_in_place(command)
    result = execute_locally(command, tmp_path, shell, runner="none")
    proc = subprocess.run([shell, "-c", command], cwd=tmp_path, capture_output=True, text=True, check=False)
    expected = (proc.stdout + proc.stderr).replace(f"{shell}: ", "").replace("line 1: ", "")
    assert result.exit_code == proc.returncode
    assert result.output.replace("sh: ", "").replace("line 1: ", "").split(":")[-1] == expected.split(":")[-1]


@pytest.mark.parametrize(
    "command",
    ["exit 3", "set -e", "FOO=1 true", "echo $x", "a; b", "a | b", "echo 'x'", "x=1", "if true", "", "kill 0"],
)
def test_anything_else_runs_in_a_subshell(command: str) -> None:
    assert not commands.runs_in_place(command)


def _exec_log(tmp_path: Path, tools: tuple[str, ...]) -> tuple[Path, dict[str, str]]:
    """A PATH where each tool logs its name before running the real one."""
    shims = tmp_path / "shims"
    shims.mkdir()
    log = tmp_path / "exec.log"
    for tool in tools:
        real = shutil.which(tool, path="/usr/bin:/bin")
        assert real
        shim = shims / tool
        shim.write_text(f'#!/bin/sh\necho {tool} >>"{log}"\nexec {real} "$@"\n')
        shim.chmod(0o755)
    return log, {**os.environ, "PATH": f"{shims}:/usr/bin:/bin"}


@pytest.mark.parametrize(
    ("runner", "command", "spawned"),
    [
        ("none", "true", []),  # the common case: no watchdog, no output, no process at all
        ("none", "echo hi", ["base64", "head"]),
        ("none", "echo $$", ["base64", "head", "sh"]),  # its own shell
        ("timeout", "true", ["sh", "timeout"]),  # a builtin: its own `sh` under `timeout`
        ("timeout", "head -c 0 /dev/null", ["head", "timeout"]),  # a program: `timeout` runs it, no `sh`
    ],
)
def test_wrapper_spawns_few_processes(tmp_path: Path, runner: str, command: str, spawned: list[str]) -> None:
    log, env = _exec_log(tmp_path, ("rm", "head", "base64", "sh", "timeout", "mkdir"))
    (tmp_path / "stage").mkdir()
    stdout, _, _ = run_like_runtime(wrap(command, tmp_path / "stage", runner=runner), tmp_path, "sh", env)  # type: ignore[arg-type]
    assert stdout.startswith("@LKC 0 ")
    started = log.read_text().split()
    assert started[0] == "sh"  # the wrapper itself, started by the runtime
    assert sorted(started[1:]) == spawned


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("command", ["sleep 20", "echo a; sleep 20"])
def test_wrapper_timeout_kills_a_program_or_its_shell(tmp_path: Path, shell: str, command: str) -> None:
    # `sleep 20` is run by `timeout` itself (plain words, a program); the other by its own `sh`.
    started = time.monotonic()
    result = execute_locally(command, tmp_path, shell, timeout=1)
    assert time.monotonic() - started < 5 and result.timed_out and result.exit_code == 124


@pytest.mark.parametrize("shell", SHELLS)
def test_a_program_run_without_its_shell_answers_as_sh_c(
    tmp_path: Path, shell: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a b").mkdir()
    for name in ("x1", "x2", "y"):
        (tmp_path / "a b" / name).write_text(name)
    for command in ["ls x*", "ls a*", "cat nosuch", "nosuchprog x", "./nosuch", "ls  -a   ."]:
        assert commands.runs_in_place(command)
        result = execute_locally(command, tmp_path / "a b", shell, runner="timeout")
        with monkeypatch.context() as patched:  # the same call through its own `sh`
            patched.setattr(commands, "runs_without_shell", lambda _command: False)
            assert result == execute_locally(command, tmp_path / "a b", shell, runner="timeout"), command


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_capture_unlinked_while_the_command_runs_keeps_its_output(tmp_path: Path, runner: str) -> None:
    # A sweep removes the files of calls long before; a call still running then reads its own back
    # through /dev/fd/3 (`wrap` numbers the call 1: its capture is `o.1`).
    result = execute_locally(f"echo a; rm {tmp_path}/stage/o.1; echo b", tmp_path, runner=runner)
    assert (result.output, result.exit_code) == ("a\nb\n", 0)


@pytest.mark.parametrize("shell", SHELLS)
def test_wrapper_timeout_kills_and_reports(tmp_path: Path, shell: str) -> None:
    started = time.monotonic()
    result = execute_locally("echo a; sleep 20", tmp_path, shell, timeout=1)
    assert time.monotonic() - started < 5
    assert result.timed_out and result.exit_code == 124
    assert result.output.startswith("a\n")
    assert "Killed" not in result.output


@pytest.mark.parametrize("runner", RUNNERS)
def test_wrapper_encodes_with_python_when_base64_is_missing(tmp_path: Path, runner: str) -> None:
    result = execute_locally(r"printf 'a\377b'; exit 2", tmp_path, has_base64=False, runner=runner)
    assert (result.output, result.exit_code) == ("a\ufffdb", 2)


@pytest.mark.parametrize("runner", RUNNERS)
def test_wrapper_truncates_in_the_pod(tmp_path: Path, runner: str) -> None:
    result = execute_locally("yes | head -c 100000", tmp_path, max_output=10, runner=runner)
    assert result.output == "y\ny\ny\ny\ny\n"
    assert result.truncated is True
    exact = execute_locally("printf 0123456789", tmp_path, max_output=10, runner=runner)
    assert (exact.output, exact.truncated) == ("0123456789", False)


@pytest.mark.parametrize("runner", RUNNERS)
def test_wrapper_stdin_and_working_directory(tmp_path: Path, runner: str) -> None:
    workdir = tmp_path / "new dir" / "x"
    result = execute_locally("cat; pwd", tmp_path, cwd=str(workdir), runner=runner)
    assert result.output == f"{workdir}\n"
    assert workdir.is_dir()


@pytest.mark.parametrize("runner", RUNNERS)
def test_wrapper_reports_an_unusable_working_directory(tmp_path: Path, runner: str) -> None:
    (tmp_path / "file").write_text("")
    result = execute_locally("true", tmp_path, cwd=str(tmp_path / "file" / "sub"), runner=runner)
    assert result.exit_code is None
    assert "working directory" in result.output
    assert not (tmp_path / "stage").exists()  # the working directory is checked first


@pytest.mark.parametrize("runner", RUNNERS)
def test_wrapper_reports_an_unusable_staging_directory(tmp_path: Path, runner: str) -> None:
    (tmp_path / "stage").write_text("not a directory")
    result = execute_locally("echo hi", tmp_path, runner=runner)
    assert result.exit_code is None
    assert "capture file" in result.output


def test_probe_learns_the_runtime(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SANDBOX_EXEC_TIMEOUT_SECONDS"}
    stdout, _, code = run_like_runtime(probe.build_probe(), tmp_path, env=env)
    info = probe.parse_probe(stdout)
    assert code == 0
    assert info.base_dir == str(tmp_path)
    assert info.runner == "timeout" and info.has_base64
    assert (tmp_path / probe.STAGING_DIRNAME).is_dir()
    assert info.exec_limit == 300.0  # a session leader, as the runtime starts it: its default limit


@pytest.mark.parametrize(
    ("setting", "limit"), [("2", 2.0), ("0.5", 0.5), ("bogus", 300.0), ("", 300.0), ("1\n2", None), (" 7", None)]
)
def test_probe_reads_the_runtime_limit(tmp_path: Path, setting: str, limit: float | None) -> None:
    env = {**os.environ, "SANDBOX_EXEC_TIMEOUT_SECONDS": setting}
    stdout, _, _ = run_like_runtime(probe.build_probe(), tmp_path, env=env)
    assert probe.parse_probe(stdout).exec_limit == limit


def test_probe_trusts_no_limit_outside_its_own_session(tmp_path: Path) -> None:
    # Older runtimes (subprocess.run, no new session) never kill a command.
    argv = shlex.split(probe.build_probe())
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert probe.parse_probe(proc.stdout).exec_limit is None


def test_probe_sweeps_stale_staging_files(tmp_path: Path) -> None:
    staging = tmp_path / probe.STAGING_DIRNAME
    staging.mkdir()
    old, fresh = staging / "up-old", staging / "up-fresh"
    old.write_text("x")
    fresh.write_text("x")
    os.utime(old, (time.time() - 3 * 3600, time.time() - 3 * 3600))
    run_like_runtime(probe.build_probe(), tmp_path)
    assert sorted(os.listdir(staging)) == ["up-fresh"]


@pytest.mark.parametrize("shell", SHELLS)
def test_upload_finalize_codes(tmp_path: Path, shell: str) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "out").mkdir()
    os.symlink(tmp_path / "out", tmp_path / "jail-link")
    targets = {
        f"{tmp_path}/new/deep/a b": ("", "ok"),
        f"{tmp_path}/dir": ("", "is_directory"),
        f"{tmp_path}/file/child": ("", "invalid_path"),
        f"{tmp_path}/fifo": ("", "invalid_path"),
        "/sys/lkc-unit-test": ("", "permission_denied"),
        f"{tmp_path}/jail-link/x": (str(tmp_path / "jail"), "invalid_path"),
        f"{tmp_path}/jail/y": (str(tmp_path / "jail"), "ok"),
    }
    items = []
    for index, (target, (confine, _)) in enumerate(targets.items()):
        staged = tmp_path / f"staged-{index}"
        staged.write_bytes(b"data\xff")
        items.append((str(staged), target, confine))
    items.append((str(tmp_path / "never-uploaded"), f"{tmp_path}/z", ""))
    stdout, _, _ = run_like_runtime(commands.build_upload_finalize(items), tmp_path, shell)
    codes = commands.parse_upload_finalize(stdout, len(items))
    assert codes == [None if c == "ok" else c for _, c in targets.values()] + ["upload_lost"]
    assert (tmp_path / "new" / "deep" / "a b").read_bytes() == b"data\xff"
    assert not list(tmp_path.glob("staged-*"))  # every staged file consumed
    assert not (tmp_path / "out" / "x").exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_download_prepare_codes(tmp_path: Path, shell: str) -> None:
    staging = tmp_path / "stage"
    staging.mkdir()
    (tmp_path / "small").write_bytes(b"\x00\xffsmall")
    (tmp_path / "big").write_bytes(b"B" * 5000)
    (tmp_path / "dir").mkdir()
    items = [
        (f"{tmp_path}/small", ""),
        (f"{tmp_path}/big", ""),
        (f"{tmp_path}/missing", ""),
        (f"{tmp_path}/dir", ""),
        (f"{tmp_path}/small/x", ""),
        ("/proc/sys/vm/compact_memory", ""),
        ("/etc/hostname", str(tmp_path)),  # outside the confinement root
    ]
    command = commands.build_download_prepare(
        items, staging_dir=str(staging), token="tok", inline_max=1000, inline_budget=2000
    )
    stdout, _, _ = run_like_runtime(command, tmp_path, shell)
    preps = commands.parse_download_prepare(stdout, len(items))
    assert preps[0] == commands.DownloadPrep(content=b"\x00\xffsmall")
    assert preps[1].staged == "dn-tok-2"
    assert (staging / "dn-tok-2").read_bytes() == b"B" * 5000
    assert [p.error for p in preps[2:]] == [
        "file_not_found",
        "is_directory",
        "invalid_path",
        "permission_denied",
        "invalid_path",
    ]


def test_delete_and_confine_scripts(tmp_path: Path) -> None:
    (tmp_path / "jail").mkdir()
    (tmp_path / "jail" / "f").write_text("x")
    os.symlink(tmp_path, tmp_path / "jail" / "up")
    jail = str(tmp_path / "jail")

    def delete(path: str, confine: str = "") -> str:
        return commands.parse_marker(run_like_runtime(commands.build_delete(path, confine), tmp_path)[0], "@X")

    def confined(path: str) -> str:
        return commands.parse_marker(run_like_runtime(commands.build_confine_check(path, jail), tmp_path)[0], "@C")

    assert confined(f"{jail}/f") == "ok"
    assert confined(f"{jail}/up/jail/f") == "ok"  # leaves through the link and comes back in
    assert confined(f"{jail}/up/other") == "invalid_path"
    assert confined(f"{jail}/missing/deeper") == "ok"
    assert delete(f"{jail}/up/other", jail) == "invalid_path"
    assert delete(f"{jail}/nope") == "file_not_found"
    assert delete(f"{jail}/up", jail) == "ok"  # the link itself lives inside
    assert tmp_path.exists()
    assert delete(f"{jail}/f", jail) == "ok"
    assert not (tmp_path / "jail" / "f").exists()
