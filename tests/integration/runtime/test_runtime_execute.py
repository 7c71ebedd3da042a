"""`execute` on the real runtime: the quirks the transport hides."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from langchain_k8s_client import commands
from langchain_k8s_client.commands import WRAPPER_PREFIX
from langchain_k8s_client.pod_sandbox import PodSandbox
from langchain_k8s_client.probe import STAGING_DIRNAME
from langchain_k8s_client.runtime import CAPTURE_SWEEP_EVERY
from testkit.runtime_harness import RuntimeServer, runtime_process


def _running(cmdline: str) -> bool:
    """Whether a process with exactly this command line exists on the host."""
    wanted = cmdline.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "cmdline").read_bytes().rstrip(b"\0").replace(b"\0", b" ") == wanted:
                return True
        except OSError:
            continue
    return False


def test_runs_under_a_shell_with_combined_ordered_output(pod_sandbox: PodSandbox) -> None:
    result = pod_sandbox.execute("echo one && echo two >&2; echo three | tr a-z A-Z; exit 3")
    assert result.output == "one\ntwo\nTHREE\n"
    assert result.exit_code == 3
    assert result.truncated is False


def test_default_working_directory_is_the_runtime_base_dir(
    pod_sandbox: PodSandbox, runtime_server: RuntimeServer
) -> None:
    assert pod_sandbox.execute("pwd").output.strip() == str(runtime_server.base_dir)


def test_stdin_is_empty_so_readers_do_not_hang(pod_sandbox: PodSandbox) -> None:
    started = time.monotonic()
    result = pod_sandbox.execute("cat; read x || echo eof", timeout=10)
    assert result.output == "eof\n"
    assert time.monotonic() - started < 5


def test_timeout_is_enforced_in_the_pod_and_kills_the_process_tree(pod_sandbox: PodSandbox) -> None:
    started = time.monotonic()
    result = pod_sandbox.execute("echo started; sleep 37.25 & sleep 38.25", timeout=2)
    elapsed = time.monotonic() - started
    assert 1.9 < elapsed < 6
    assert result.exit_code == 124
    assert result.output.startswith("started\n")
    assert "timed out after 2 seconds" in result.output
    assert not _running("sleep 37.25")
    assert not _running("sleep 38.25")


async def test_async_timeout_is_enforced_too(pod_sandbox: PodSandbox) -> None:
    started = time.monotonic()
    result = await pod_sandbox.aexecute("sleep 30", timeout=1)
    assert result.exit_code == 124
    assert time.monotonic() - started < 5


def test_exit_137_before_the_deadline_is_not_a_timeout(pod_sandbox: PodSandbox) -> None:
    result = pod_sandbox.execute("echo x; exit 137", timeout=30)
    assert result.exit_code == 137
    # The output kept, then the note every 137 before the deadline gets (a SIGKILL, most likely the OOM killer).
    assert result.output == "x\n\n" + commands.SIGKILLED_NOTE


def test_non_utf8_output_keeps_the_real_exit_code(pod_sandbox: PodSandbox) -> None:
    result = pod_sandbox.execute(r"printf 'ok \377\376 \000 end'; exit 7")
    assert result.exit_code == 7
    assert result.output == "ok \ufffd\ufffd \x00 end"


def test_output_is_truncated_in_the_pod_at_max_output_size(runtime_server: RuntimeServer) -> None:
    with PodSandbox(runtime_server.endpoint(), sandbox_id="t", max_output_size=1000) as backend:
        result = backend.execute("head -c 5000000 /dev/zero | tr '\\0' x; echo; exit 4")
    assert result.truncated is True
    assert result.output == "x" * 1000
    assert result.exit_code == 4


def test_large_output_below_the_cap_is_complete(pod_sandbox: PodSandbox) -> None:
    result = pod_sandbox.execute("head -c 900000 /dev/zero | tr '\\0' y")
    assert result.truncated is False
    assert len(result.output) == 900000


def test_user_command_text_reaches_sh_verbatim(pod_sandbox: PodSandbox, scratch: Path) -> None:
    tricky = 'printf \'%s|\' "a  b" \'c"d\' "$((1+2))" `echo e` $(echo f) \\$HOME; echo'
    assert pod_sandbox.execute(tricky).output == 'a  b|c"d|3|e|f|$HOME|\n'
    result = pod_sandbox.execute(f"cd '{scratch}' && printf 'line1\\nline2' > f && wc -l < f && cat f")
    assert result.output == "1\nline1\nline2"


async def test_five_parallel_aexecute_calls_overlap(pod_sandbox: PodSandbox) -> None:
    await pod_sandbox.aexecute("true")  # connect first: only the commands are timed
    started = time.monotonic()
    results = await asyncio.gather(*(pod_sandbox.aexecute(f"sleep 1; echo {i}") for i in range(5)))
    elapsed = time.monotonic() - started
    assert [r.output for r in results] == [f"{i}\n" for i in range(5)]
    assert elapsed < 3, f"five 1 s commands took {elapsed:.2f} s"


def test_on_activity_reports_busy_seconds_once_per_operation(runtime_server: RuntimeServer, scratch: Path) -> None:
    calls: list[float | None] = []
    with PodSandbox(runtime_server.endpoint(), sandbox_id="t", on_activity=calls.append) as backend:
        backend.execute("true")
        backend.execute("true", timeout=42)
        backend.write(f"{scratch}/a.txt", "x")
        backend.read(f"{scratch}/a.txt")  # runs execute() inside: still one report
        backend.glob("*.txt", str(scratch))
    assert calls == [300.0, 42.0, None, None, None]


def test_timeout_arguments_are_validated(pod_sandbox: PodSandbox) -> None:
    with pytest.raises(ValueError, match="between 0 and 3600"):
        pod_sandbox.execute("true", timeout=3601)
    with pytest.raises(ValueError, match="between 0 and 3600"):
        pod_sandbox.execute("true", timeout=-1)
    assert pod_sandbox.execute("true", timeout=0).exit_code == 0


def _tools_without_timeout(root: Path) -> Path:
    # An image without coreutils `timeout`: only the tools the wrapper and tests need.
    import shutil

    bin_dir = root / "tools"
    bin_dir.mkdir()
    for tool in ("sh", "python3", "python", "base64", "head", "cat", "rm", "mkdir", "sleep", "find", "wc", "ln"):
        found = shutil.which(tool, path="/usr/bin:/bin")
        if found:
            (bin_dir / tool).symlink_to(found)
    return bin_dir


def test_images_without_timeout_fall_back_to_a_python_watchdog(tmp_path: Path) -> None:
    tools = _tools_without_timeout(tmp_path)
    with (
        runtime_process(tmp_path, "pod-no-timeout", extra_env={"PATH": str(tools)}) as server,
        PodSandbox(server.endpoint(), sandbox_id="t") as backend,
    ):
        assert backend.check_identity().runner == "python3"
        started = time.monotonic()
        result = backend.execute("echo a; sleep 39.5", timeout=2)
        assert result.exit_code == 124
        assert result.output.startswith("a\n")
        assert time.monotonic() - started < 6
        assert not _running("sleep 39.5")
        assert backend.execute("exit 5").exit_code == 5


def test_runtime_global_timeout_is_reported_as_a_timeout(tmp_path: Path) -> None:
    # The runtime's own limit (SANDBOX_EXEC_TIMEOUT_SECONDS) below the call's timeout.
    with (
        runtime_process(tmp_path, "pod-short", extra_env={"SANDBOX_EXEC_TIMEOUT_SECONDS": "1"}) as server,
        PodSandbox(server.endpoint(), sandbox_id="t") as backend,
    ):
        result = backend.execute("sleep 5", timeout=30)
    assert result.exit_code == 124
    assert "runtime killed the command at its own timeout" in result.output


def test_the_probe_learns_the_runtime_limit(pod_sandbox: PodSandbox) -> None:
    info = pod_sandbox.check_identity()
    assert info.exec_limit == 300.0  # the runtime's default: the default 300 s timeout needs no watchdog
    assert info.runner_for(300) == "none"
    assert info.runner_for(299) == "timeout"


# Commands at the default timeout run in a subshell of the wrapper (no watchdog, no
# new `sh`); what they can observe must be what `sh -c` gives them.
@pytest.mark.parametrize(
    ("command", "output", "code"),
    [
        ("echo a; exit 7; echo b", "a\n", 7),
        ("set -e; false; echo not reached", "", 1),
        ("trap 'echo bye' EXIT; echo hi >&2", "hi\nbye\n", 0),
        ("cat; read line || echo eof", "eof\n", 0),
        ('echo "$0|$#|$*|${o-}${e-}${a-}"', "sh|0||\n", 0),
        ("kill -TERM $$; echo after", "", 143),  # $$ is the command's own shell
        ("echo before; kill 0; echo after", "before\n", 143),  # its process group, not the wrapper
        (r"printf 'x\377\000'; exit 3", "x\ufffd\x00", 3),
    ],
)
def test_default_timeout_commands_behave_like_sh_c(
    pod_sandbox: PodSandbox, runtime_server: RuntimeServer, command: str, output: str, code: int
) -> None:
    result = pod_sandbox.execute(command)
    assert (result.output, result.exit_code, result.truncated) == (output, code, False)
    assert _capture_sizes(runtime_server.base_dir / STAGING_DIRNAME) <= {0}  # emptied (no `rm` per call)


def _capture_sizes(staging: Path) -> set[int]:
    """Sizes of the capture files (the staged wrappers stay, see commands.UserCommand)."""
    return {p.stat().st_size for p in staging.iterdir() if not p.name.startswith(WRAPPER_PREFIX)}


def test_cd_and_variables_do_not_leak_between_commands(pod_sandbox: PodSandbox, runtime_server: RuntimeServer) -> None:
    assert pod_sandbox.execute("cd /; X=1; export Y=2").exit_code == 0
    assert pod_sandbox.execute('pwd; echo "${X-}${Y-}"').output == f"{runtime_server.base_dir}\n\n"


def test_timeout_at_the_runtime_limit_is_reported_as_a_timeout(tmp_path: Path) -> None:
    # At or above the runtime's limit no watchdog runs: the runtime kills the group.
    with (
        runtime_process(tmp_path, "pod-limit-2", extra_env={"SANDBOX_EXEC_TIMEOUT_SECONDS": "2"}) as server,
        PodSandbox(server.endpoint(), sandbox_id="t") as backend,
    ):
        assert backend.check_identity().exec_limit == 2.0
        started = time.monotonic()
        result = backend.execute("echo lost; sleep 41.5 & sleep 42.5", timeout=2)
        elapsed = time.monotonic() - started
        assert 1.9 < elapsed < 6
        assert (result.exit_code, result.truncated) == (124, False)
        assert result.output.startswith("Error: command timed out after 2 seconds: the sandbox runtime killed")
        assert "output is lost" in result.output
        assert not _running("sleep 41.5")
        assert not _running("sleep 42.5")
        # Below the limit the in-pod watchdog still kills first and keeps the partial output.
        below = backend.execute("echo kept; sleep 43.5", timeout=1)
        assert below.exit_code == 124
        assert below.output.startswith("kept\n")
        assert "killed inside the sandbox" in below.output
        assert not _running("sleep 43.5")
        assert backend.execute("echo fine").output == "fine\n"
        # The killed wrapper's capture goes with a sweep within two spans (in the background, off the call's path).
        for _ in range(2 * CAPTURE_SWEEP_EVERY):
            backend.execute("true")
        deadline = time.monotonic() + 10
        while _capture_sizes(server.base_dir / STAGING_DIRNAME) - {0}:
            assert time.monotonic() < deadline
            time.sleep(0.05)
