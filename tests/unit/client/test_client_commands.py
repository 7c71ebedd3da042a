"""Shell scripts: quoting, parsing, and their behaviour when run locally under dash and bash.

The scripts are executed exactly as the runtime would (shlex.split, no shell,
strict UTF-8 decoding of the output), just without HTTP.
"""

from __future__ import annotations

import base64
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from langchain_k8s_client import commands
from langchain_k8s_client.errors import SandboxError

SHELLS = [s for s in ("dash", "bash") if shutil.which(s)]


def run_like_runtime(command: str, cwd: Path, shell: str = "sh") -> tuple[str, str, int]:
    argv = shlex.split(command)
    if argv[0] == "sh":
        argv[0] = shell
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=60, check=False)
    # The runtime decodes with text=True: anything not UTF-8 would fail the request.
    return proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8"), proc.returncode


def wrap(
    command: str, staging: Path, *, timeout: int = 30, max_output: int = 1000, cwd: str = "", has_base64: bool = True
) -> str:
    return commands.build_user_command(
        command,
        timeout=timeout,
        max_output=max_output,
        staging_dir=str(staging),
        cwd=cwd,
        runner="timeout",
        has_base64=has_base64,
    )


def execute_locally(
    command: str, tmp_path: Path, shell: str = "sh", **kwargs: object
) -> commands.CommandResult:
    staging = tmp_path / "stage"
    stdout, stderr, code = run_like_runtime(wrap(command, staging, **kwargs), tmp_path, shell)  # type: ignore[arg-type]
    return commands.parse_user_command(
        stdout,
        stderr,
        code,
        timeout=int(kwargs.get("timeout", 30)),  # type: ignore[call-overload]
        max_output=int(kwargs.get("max_output", 1000)),  # type: ignore[call-overload]
        runner="timeout",
    )


# ----------------------------------------------------------------------------- building


def test_user_command_travels_as_one_argument() -> None:
    nasty = "echo '$(x)' \"`y`\"\n\t; exit 3 # \\ '\"'"
    argv = shlex.split(wrap(nasty, Path("/st age"), timeout=7, max_output=10, cwd="/w d"))
    assert argv[:2] == ["sh", "-c"]
    assert argv[3:] == ["lkc", "7", "11", "/st age", nasty, "/w d"]
    assert nasty not in argv[2]  # never interpolated into the script text


def test_runner_variants() -> None:
    for runner, needle in (("timeout", "timeout -s KILL"), ("python3", "python3 -S -c"), ("none", 'sh -c "$4"')):
        script = shlex.split(
            commands.build_user_command("x", timeout=1, max_output=1, staging_dir="/s", cwd="", runner=runner)  # type: ignore[arg-type]
        )[2]
        assert needle in script


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


def test_parse_runtime_failures() -> None:
    timeout = commands.parse_user_command(
        "", "Failed to execute command: Command '...' timed out after 300.0 seconds", 1,
        timeout=600, max_output=10, runner="timeout",
    )
    assert (timeout.exit_code, timeout.timed_out) == (124, True)
    broken = commands.parse_user_command(
        "", "Failed to execute command: [Errno 2] No such file or directory: 'sh'", 1,
        timeout=600, max_output=10, runner="timeout",
    )
    assert broken.exit_code is None
    assert "No such file or directory: 'sh'" in broken.output
    capture = commands.parse_user_command("@LKC! capture\n", "", 0, timeout=1, max_output=1, runner="timeout")
    assert capture.exit_code is None and "capture file" in capture.output


def test_parse_probe() -> None:
    info = commands.parse_probe("@LKCP\nbase=/app\nhost=pod-1\nrunner=python3\npython3=1\n")
    assert info == commands.RuntimeInfo("/app", "pod-1", "python3", True, False, has_base64=False)
    assert info.staging_dir == f"/app/{commands.STAGING_DIRNAME}"
    assert commands.parse_probe("@LKCP\nbase=/a\nrunner=weird\n").runner == "none"
    for bad in ("", "hello", "@LKCP\nbase=relative\n"):
        with pytest.raises(SandboxError):
            commands.parse_probe(bad)


def test_parse_counts_must_match() -> None:
    with pytest.raises(SandboxError):
        commands.parse_upload_finalize("@U ok\n", 2)
    with pytest.raises(SandboxError):
        commands.parse_download_prepare("@D file_not_found\n", 2)
    with pytest.raises(SandboxError):
        commands.parse_marker("nothing", "@X")


def test_parse_download_prepare_mixed() -> None:
    stdout = (
        "@D inline 3\n" + base64.encodebytes(b"abc").decode()
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


@pytest.mark.parametrize("shell", SHELLS)
def test_wrapper_keeps_order_exit_code_and_bytes(tmp_path: Path, shell: str) -> None:
    result = execute_locally(r"echo out; echo err >&2; printf '\377\000'; exit 9", tmp_path, shell)
    assert result.output == "out\nerr\n\ufffd\x00"
    assert result.exit_code == 9
    assert os.listdir(tmp_path / "stage") == []  # capture file removed


@pytest.mark.parametrize("shell", SHELLS)
def test_wrapper_timeout_kills_and_reports(tmp_path: Path, shell: str) -> None:
    started = time.monotonic()
    result = execute_locally("echo a; sleep 20", tmp_path, shell, timeout=1)
    assert time.monotonic() - started < 5
    assert result.timed_out and result.exit_code == 124
    assert result.output.startswith("a\n")
    assert "Killed" not in result.output


def test_wrapper_encodes_with_python_when_base64_is_missing(tmp_path: Path) -> None:
    result = execute_locally(r"printf 'a\377b'; exit 2", tmp_path, has_base64=False)
    assert (result.output, result.exit_code) == ("a\ufffdb", 2)


def test_wrapper_truncates_in_the_pod(tmp_path: Path) -> None:
    result = execute_locally("yes | head -c 100000", tmp_path, max_output=10)
    assert result.output == "y\ny\ny\ny\ny\n"
    assert result.truncated is True


def test_wrapper_stdin_and_working_directory(tmp_path: Path) -> None:
    workdir = tmp_path / "new dir" / "x"
    result = execute_locally("cat; pwd", tmp_path, cwd=str(workdir))
    assert result.output == f"{workdir}\n"
    assert workdir.is_dir()


def test_wrapper_reports_an_unusable_working_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = execute_locally("true", tmp_path, cwd=str(tmp_path / "file" / "sub"))
    assert result.exit_code is None
    assert "working directory" in result.output


def test_probe_learns_the_runtime(tmp_path: Path) -> None:
    stdout, _, code = run_like_runtime(commands.build_probe(), tmp_path)
    info = commands.parse_probe(stdout)
    assert code == 0
    assert info.base_dir == str(tmp_path)
    assert info.runner == "timeout" and info.has_base64
    assert info.staging_writable and (tmp_path / commands.STAGING_DIRNAME).is_dir()


def test_probe_sweeps_stale_staging_files(tmp_path: Path) -> None:
    staging = tmp_path / commands.STAGING_DIRNAME
    staging.mkdir()
    old, fresh = staging / "up-old", staging / "up-fresh"
    old.write_text("x")
    fresh.write_text("x")
    os.utime(old, (time.time() - 3 * 3600, time.time() - 3 * 3600))
    run_like_runtime(commands.build_probe(), tmp_path)
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
        "file_not_found", "is_directory", "invalid_path", "permission_denied", "invalid_path",
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
