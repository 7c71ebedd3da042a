"""Hostile input (issue 12): hostile paths and commands through the client, end to end (real operator,
agent-sandbox controller and python runtime pod). Each gets the right error code, nothing is injected,
and the sandbox answers normally afterwards.

`pytest -m hostile` runs this suite alone; it is also part of the normal e2e run."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from deepagents.backends.protocol import ReadResult

from langchain_k8s_client import AgentSessionSandbox, ResponseLimits, ResponseTooLarge

pytestmark = [pytest.mark.e2e, pytest.mark.hostile, pytest.mark.node]  # hostile commands in a real pod
SESSION = "hostile-client"
VROOT = "/tmp/vroot"
MARK = "pwned"  # every injection attempt below would create a file of this name (names hold no further '/')
MARK_PLACES = f"/tmp/{MARK}* /tmp/h/{MARK}* ./{MARK}* ~/{MARK}* /{MARK}* {VROOT}/{MARK}*"
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def sandbox(pool_namespace: str) -> Iterator[AgentSessionSandbox]:
    with AgentSessionSandbox(SESSION, pool_namespace, warm_pool="python-pool", ttl="1h") as backend:
        reset = f"rm -rf /tmp/h {VROOT} {MARK_PLACES}; mkdir -p /tmp/h {VROOT}/in && echo in > {VROOT}/in/f"
        setup = backend.execute(reset)
        assert setup.exit_code == 0, setup
        yield backend


@pytest.fixture(scope="module")
def virtual(sandbox: AgentSessionSandbox, pool_namespace: str) -> Iterator[AgentSessionSandbox]:
    """The same session through a second client confined to VROOT (virtual paths)."""
    with AgentSessionSandbox(
        SESSION, pool_namespace, warm_pool="python-pool", ttl="1h", keep=True, virtual_mode=True, root_dir=VROOT
    ) as backend:
        yield backend


def content_of(result: ReadResult) -> str:
    return str(result.file_data["content"]) if result.file_data else ""


def not_injected(sandbox: AgentSessionSandbox) -> None:
    result = sandbox.execute(f"ls -d {MARK_PLACES} 2>/dev/null | wc -l")
    assert result.output.strip() == "0", f"an injection ran: {result.output}"


def usable(sandbox: AgentSessionSandbox) -> None:
    result = sandbox.execute("echo still-usable", timeout=30)
    assert result.exit_code == 0 and result.output.strip() == "still-usable", result


# ---------------------------------------------------------------------- names that try to inject

INJECTING_NAMES = [
    ("command-substitution", f"/tmp/h/$(touch {MARK}1)"),
    ("backticks", f"/tmp/h/`touch {MARK}2`"),
    ("single-quote", f"/tmp/h/it's'; touch {MARK}3; '"),
    ("redirect", f"/tmp/h/x > {MARK}9"),
    ("double-quote", f'/tmp/h/say "hi"; touch {MARK}4'),
    ("newline", f"/tmp/h/a\ntouch {MARK}5\n"),
    ("semicolon-and-pipe", f"/tmp/h/x; touch {MARK}6 | cat"),
    ("dash-option", "/tmp/h/-rf --no-preserve-root"),
    ("glob-and-brace", "/tmp/h/*{a,b}[c]?"),
]


@pytest.mark.parametrize(("case", "path"), INJECTING_NAMES, ids=[c[0] for c in INJECTING_NAMES])
def test_injecting_name_is_a_literal_name(sandbox: AgentSessionSandbox, case: str, path: str) -> None:
    content = f"content of {case}\n"
    assert sandbox.write(path, content).error is None, case
    assert sandbox.download_files([path])[0].content == content.encode(), case
    listed = [e["path"] for e in sandbox.ls("/tmp/h").entries or []]
    assert path in listed, (case, listed)
    assert sandbox.edit(path, "content", "edited").error is None, case
    assert "edited of" in content_of(sandbox.read(path)), case
    assert sandbox.delete(path).error is None, case
    not_injected(sandbox)


def test_grep_and_glob_patterns_are_not_commands(sandbox: AgentSessionSandbox) -> None:
    assert sandbox.write("/tmp/h/g.txt", f"$(touch {MARK}7)\n").error is None
    found = sandbox.grep(f"$(touch {MARK}7)", "/tmp/h")
    assert found.error is None and [m["line"] for m in found.matches or []] == [1], found
    globbed = sandbox.glob(f"$(touch {MARK}8)*", "/tmp/h")
    assert globbed.error is None and not globbed.matches, globbed
    not_injected(sandbox)


# ------------------------------------------------------------------------------ odd names


def test_4096_byte_path_is_invalid_path(sandbox: AgentSessionSandbox) -> None:
    path = "/tmp/h/" + "a" * 4089
    assert len(path.encode()) == 4096
    assert sandbox.upload_files([(path, b"x")])[0].error == "invalid_path"
    assert sandbox.download_files([path])[0].error == "invalid_path"
    assert "invalid_path" in (sandbox.write(path, "x").error or "")
    assert "invalid_path" in (sandbox.read(path).error or "")
    usable(sandbox)


def test_256_byte_component_is_invalid_path_and_255_works(sandbox: AgentSessionSandbox) -> None:
    assert sandbox.upload_files([("/tmp/h/" + "b" * 256, b"x")])[0].error == "invalid_path"
    longest = "/tmp/h/" + "b" * 255
    assert sandbox.upload_files([(longest, b"ok")])[0].error is None
    assert sandbox.download_files([longest])[0].content == b"ok"


def test_non_utf8_name_round_trips_and_lists(sandbox: AgentSessionSandbox) -> None:
    path = "/tmp/h/latin1-\udce9t\udce9.txt"  # b"\xe9t\xe9" as the pod stores it
    assert sandbox.upload_files([(path, b"bytes \xff\xfe")])[0].error is None
    assert sandbox.download_files([path])[0].content == b"bytes \xff\xfe"
    assert path in [e["path"] for e in sandbox.ls("/tmp/h").entries or []]
    assert "not UTF-8" in (sandbox.read(path).error or "")  # deepagents' read cannot carry it: said so
    assert sandbox.execute("ls /tmp/h | grep -c latin1").output.strip() == "1"


def test_nul_byte_in_path_is_invalid_path(sandbox: AgentSessionSandbox) -> None:
    assert sandbox.upload_files([("/tmp/h/a\x00b", b"x")])[0].error == "invalid_path"
    assert "invalid_path" in (sandbox.read("/tmp/h/a\x00b").error or "")


def test_relative_and_directory_paths(sandbox: AgentSessionSandbox) -> None:
    assert sandbox.upload_files([("relative.txt", b"x")])[0].error == "invalid_path"
    assert sandbox.download_files(["/tmp/h"])[0].error == "is_directory"
    assert sandbox.download_files(["/tmp/h/missing"])[0].error == "file_not_found"
    assert sandbox.upload_files([("/tmp/h", b"x")])[0].error == "is_directory"


# ------------------------------------------------------------------- virtual root escapes


@pytest.mark.parametrize(
    "path", ["/../../etc/passwd", "/in/../../etc/passwd", "~/x", "/in/./../../../etc/shadow"], ids=str
)
def test_traversal_out_of_the_virtual_root_is_invalid_path(virtual: AgentSessionSandbox, path: str) -> None:
    assert "invalid_path" in (virtual.read(path).error or "")
    assert virtual.download_files([path])[0].error == "invalid_path"
    assert virtual.upload_files([(path, b"x")])[0].error == "invalid_path"


def test_symlinks_out_of_the_virtual_root_are_invalid_path(
    sandbox: AgentSessionSandbox, virtual: AgentSessionSandbox
) -> None:
    made = sandbox.execute(f"ln -sfn /etc {VROOT}/out && ln -sfn /etc/hostname {VROOT}/host && echo made")
    assert "made" in made.output, made
    assert "invalid_path" in (virtual.read("/out/passwd").error or "")
    assert "invalid_path" in (virtual.read("/host").error or "")
    assert virtual.download_files(["/out/passwd", "/host"])[0].error == "invalid_path"
    assert virtual.download_files(["/host"])[0].error == "invalid_path"
    assert virtual.upload_files([("/out/evil", b"x"), ("/host", b"x")])[0].error == "invalid_path"
    assert "invalid_path" in (virtual.write("/out/evil", "x").error or "")
    assert "invalid_path" in (virtual.edit("/host", "a", "b").error or "")
    assert "invalid_path" in (virtual.ls("/out").error or "")
    assert "invalid_path" in (virtual.grep("root", "/out").error or "")
    # Deleting the link itself (it lies inside the root) removes the link, never its target.
    assert virtual.delete("/host").error is None
    assert sandbox.execute("test -e /etc/evil || echo absent; test -s /etc/hostname && echo kept").output.split() == [
        "absent",
        "kept",
    ]
    # Inside the root, everything still works.
    assert content_of(virtual.read("/in/f")).strip() == "in"


# ------------------------------------------------------------------------- hostile commands


def test_non_utf8_output_is_kept(sandbox: AgentSessionSandbox) -> None:
    result = sandbox.execute("printf 'ok \\377\\376 end'")
    assert result.exit_code == 0 and result.output.startswith("ok ") and result.output.endswith(" end"), result
    assert "\ufffd" in result.output


def test_100_mb_of_output_is_cut_in_the_pod(sandbox: AgentSessionSandbox) -> None:
    started = time.monotonic()
    result = sandbox.execute("head -c 100000000 /dev/zero | tr '\\0' a", timeout=60)
    assert result.exit_code == 0 and result.truncated, (result.exit_code, result.truncated)
    assert len(result.output) == 1024 * 1024  # DEFAULT_MAX_OUTPUT
    assert time.monotonic() - started < 30
    usable(sandbox)


def test_100_mb_answer_is_cut_by_the_response_cap(pool_namespace: str, sandbox: AgentSessionSandbox) -> None:
    """A client that asks for 200 MB of output but bounds answers at 16 MiB: the answer is cut off with
    ResponseTooLarge (naming the bound), the same for a 100 MB download; the sandbox goes on."""
    with AgentSessionSandbox(
        SESSION,
        pool_namespace,
        warm_pool="python-pool",
        ttl="1h",
        keep=True,
        max_output_size=200 * MIB,
        response_limits=ResponseLimits(max_bytes=16 * MIB),
    ) as capped:
        with pytest.raises(ResponseTooLarge, match="max_bytes"):
            capped.execute("head -c 100000000 /dev/zero | tr '\\0' a", timeout=60)
        made = capped.execute("head -c 100000000 /dev/zero > /tmp/h/big && echo made", timeout=60)
        assert made.output.strip() == "made", made
        with pytest.raises(ResponseTooLarge):
            capped.download_files(["/tmp/h/big"])
        usable(capped)
        capped.execute("rm -f /tmp/h/big")
    usable(sandbox)


def test_process_that_never_exits_is_killed_at_its_timeout(sandbox: AgentSessionSandbox) -> None:
    started = time.monotonic()
    result = sandbox.execute("echo started; sleep 100000", timeout=3)
    took = time.monotonic() - started
    assert result.exit_code == 124 and "started" in result.output and "timed out" in result.output, result
    assert took < 15, took
    usable(sandbox)


def test_detached_children_that_ignore_sigterm_die_with_the_command(sandbox: AgentSessionSandbox) -> None:
    result = sandbox.execute("(trap '' TERM HUP; exec sleep 99999) & (trap '' TERM; sleep 99998) & wait", timeout=3)
    assert result.exit_code == 124, result
    # The sleeps' cmdlines are exactly these bytes; the counter's own command line only mentions them.
    count = (
        "python3 -c \"import os;print(sum(1 for p in os.listdir('/proc') if p.isdigit() and "
        "open('/proc/'+p+'/cmdline','rb').read() in (b'sleep\\x0099999\\x00', b'sleep\\x0099998\\x00')))\""
    )
    left = sandbox.execute(count).output.strip()
    assert left == "0", f"sleeps left running: {left}"


def test_command_that_closes_its_output_and_hangs(sandbox: AgentSessionSandbox) -> None:
    result = sandbox.execute("exec >&- 2>&-; sleep 100000", timeout=3)
    assert result.exit_code == 124, result
    usable(sandbox)


def test_command_with_a_nul_byte_is_an_error_not_a_crash(sandbox: AgentSessionSandbox) -> None:
    result = sandbox.execute("echo a\x00b")
    assert result.exit_code != 0 or "a" in result.output, result
    usable(sandbox)


def test_one_megabyte_command_line(sandbox: AgentSessionSandbox) -> None:
    result = sandbox.execute("true " + "x" * MIB)
    assert isinstance(result.output, str), result  # E2BIG or success, either reported, never a crash
    usable(sandbox)


def test_shell_metacharacters_in_a_command_run_as_written(sandbox: AgentSessionSandbox) -> None:
    result = sandbox.execute("echo \"$(echo sub)\" '$(echo literal)' `echo tick` $((6*7))")
    assert result.output.strip() == "sub $(echo literal) tick 42", result


@pytest.mark.realnode
def test_fork_bomb_under_the_pids_limit(sandbox: AgentSessionSandbox) -> None:
    """The real node's kubelet sets podPidsLimit 4096: a fork bomb hits it, is killed at its timeout, and
    the sandbox answers again."""
    fork_bomb_is_contained(sandbox)


def fork_bomb_is_contained(sandbox: AgentSessionSandbox) -> None:
    """A fork bomb is killed at its timeout and the sandbox answers again within a minute (test_gvisor.py too)."""
    result = sandbox.execute("f() { f | f & }; f; sleep 100", timeout=5)
    # Killed at its timeout, said as every timed-out command is (exit 124, a note): never a missing code.
    assert result.exit_code == 124, result
    deadline = time.monotonic() + 60
    while True:
        try:
            usable(sandbox)
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def test_zz_sandbox_usable_and_nothing_injected(sandbox: AgentSessionSandbox) -> None:
    """Runs last in the module: after every case above."""
    not_injected(sandbox)
    usable(sandbox)
    assert sandbox.write("/tmp/h/final.txt", "fine\n").error is None
    assert sandbox.download_files(["/tmp/h/final.txt"])[0].content == b"fine\n"
