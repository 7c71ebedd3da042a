"""Files on the real runtime: transfers, error codes, awkward names, staging hygiene."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from langchain_k8s_client import sandbox_files
from langchain_k8s_client.commands import WRAPPER_PREFIX
from langchain_k8s_client.pod_sandbox import PodSandbox
from langchain_k8s_client.probe import STAGING_DIRNAME
from testkit.runtime_harness import RuntimeServer

TEN_MIB = 10 * 1024 * 1024

# Each name is a trap for some layer: shell quoting, command substitution, option
# parsing, globbing, line-based parsing, URL decoding, and a byte that is not UTF-8
# (carried as a lone surrogate, like os.fsdecode does).
AWKWARD_NAMES = [
    "with space.txt",
    "quote'single.txt",
    'quote"double.txt',
    "$(touch PWNED).txt",
    "`touch PWNED2`.txt",
    "semi;colon && amp.txt",
    "new\nline.txt",
    "tab\tname.txt",
    "-rf",
    "star*[x]?{a,b}.txt",
    "back\\slash.txt",
    "percent%2F%41.txt",
    "ünïcødé 世界.txt",
    "bad-\udcff-byte.txt",
    "@D inline 3",
]


def test_ten_mib_round_trip_is_byte_exact(pod_sandbox: PodSandbox, scratch: Path) -> None:
    data = os.urandom(TEN_MIB)
    target = f"{scratch}/deep/er/blob.bin"
    assert pod_sandbox.upload_files([(target, data)])[0].error is None
    assert Path(target).read_bytes() == data
    [downloaded] = pod_sandbox.download_files([target])
    assert downloaded.error is None
    assert downloaded.content == data


async def test_ten_mib_round_trip_async(pod_sandbox: PodSandbox, scratch: Path) -> None:
    data = os.urandom(TEN_MIB + 17)
    target = f"{scratch}/blob.bin"
    assert (await pod_sandbox.aupload_files([(target, data)]))[0].error is None
    [downloaded] = await pod_sandbox.adownload_files([target])
    assert downloaded.content == data


def test_batch_mixing_inline_staged_and_failing_downloads(pod_sandbox: PodSandbox, scratch: Path) -> None:
    small, big = b"small\x00\xff", os.urandom(3 * 1024 * 1024)
    (scratch / "small").write_bytes(small)
    (scratch / "big").write_bytes(big)
    (scratch / "empty").write_bytes(b"")
    names = ["big", "missing", "small", "empty"]
    results = pod_sandbox.download_files([f"{scratch}/{name}" for name in names])
    assert [(r.content, r.error) for r in results] == [
        (big, None),
        (None, "file_not_found"),
        (small, None),
        (b"", None),
    ]


def test_upload_overwrites_in_place_keeping_the_mode(pod_sandbox: PodSandbox, scratch: Path) -> None:
    target = scratch / "script.sh"
    target.write_text("old")
    target.chmod(0o750)
    assert pod_sandbox.upload_files([(str(target), b"new")])[0].error is None
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o750


def test_download_error_codes(pod_sandbox: PodSandbox, scratch: Path) -> None:
    (scratch / "file.txt").write_text("x")
    (scratch / "dir").mkdir()
    os.mkfifo(scratch / "fifo")
    paths = {
        f"{scratch}/missing.txt": "file_not_found",
        f"{scratch}/missing/deeper.txt": "file_not_found",
        f"{scratch}/dir": "is_directory",
        f"{scratch}/file.txt/child": "invalid_path",  # a parent is a file (ENOTDIR)
        f"{scratch}/fifo": "invalid_path",  # never block on a FIFO
        "/proc/sys/vm/compact_memory": "permission_denied",  # write-only even for root
        "relative/path.txt": "invalid_path",
        f"{scratch}/nul\x00byte": "invalid_path",
    }
    results = pod_sandbox.download_files(list(paths))
    assert {r.path: r.error for r in results} == paths
    assert all(r.content is None for r in results)


def test_upload_error_codes(pod_sandbox: PodSandbox, scratch: Path) -> None:
    (scratch / "file.txt").write_text("x")
    (scratch / "dir").mkdir()
    paths = {
        f"{scratch}/dir": "is_directory",
        f"{scratch}/file.txt/child": "invalid_path",
        "/sys/lkc-test-file": "permission_denied",  # sysfs refuses creation even for root
        "/proc/lkc-test-file": "permission_denied",
        "relative.txt": "invalid_path",
        f"{scratch}/nul\x00byte": "invalid_path",
    }
    results = pod_sandbox.upload_files([(p, b"data") for p in paths])
    assert {r.path: r.error for r in results} == paths
    assert (scratch / "file.txt").read_text() == "x"


def test_write_and_edit_report_failures(pod_sandbox: PodSandbox, scratch: Path) -> None:
    (scratch / "file.txt").write_text("x")
    assert pod_sandbox.write(f"{scratch}/file.txt/child", "x").error is not None
    assert pod_sandbox.write("/sys/lkc-x/y", "x").error == "Failed to write file '/sys/lkc-x/y': permission_denied"
    assert "not found" in (pod_sandbox.edit(f"{scratch}/nope.txt", "a", "b").error or "")
    assert "not a regular file" in (pod_sandbox.edit(str(scratch), "a", "b").error or "")


@pytest.mark.parametrize("name", AWKWARD_NAMES, ids=lambda n: repr(n)[1:-1][:24])
def test_awkward_names_survive_every_operation(pod_sandbox: PodSandbox, scratch: Path, name: str) -> None:
    directory = f"{scratch}/sub dir"
    path = f"{directory}/{name}"
    on_disk = os.fsencode(path)

    assert pod_sandbox.upload_files([(path, b"payload\xff")])[0].error is None
    assert Path(os.fsdecode(on_disk)).read_bytes() == b"payload\xff"
    assert pod_sandbox.download_files([path])[0].content == b"payload\xff"

    assert pod_sandbox.write(path, "needle here\n").error is None
    listing = pod_sandbox.ls(directory)
    assert listing.error is None
    assert [e["path"] for e in listing.entries or []] == [path]
    grep = pod_sandbox.grep("needle", directory)
    assert grep.error is None
    assert grep.matches == [{"path": path, "line": 1, "text": "needle here"}]
    assert pod_sandbox.edit(path, "needle", "pin").occurrences == 1
    assert Path(path).read_text() == "pin here\n"
    assert pod_sandbox.delete(path).error is None
    assert not os.path.lexists(path)
    assert not list(Path(scratch).rglob("PWNED*"))
    assert not Path("PWNED").exists()


def test_staging_is_left_clean(pod_sandbox: PodSandbox, runtime_server: RuntimeServer, scratch: Path) -> None:
    pod_sandbox.upload_files([(f"{scratch}/a", os.urandom(2 * 1024 * 1024)), (f"{scratch}/b", b"b")])
    pod_sandbox.download_files([f"{scratch}/a", f"{scratch}/b"])
    pod_sandbox.edit(f"{scratch}/b", "b", "c" * 20000)  # payload above the inline limit: staged
    pod_sandbox.execute("echo hi")
    staging = runtime_server.base_dir / STAGING_DIRNAME
    # Only the commands' capture files stay between sweeps, empty (see scripts/capture.sh), and the
    # staged command wrappers (named by their content, see commands.UserCommand).
    left = {(p.name[:2], p.stat().st_size) for p in staging.iterdir() if not p.name.startswith(WRAPPER_PREFIX)}
    assert left <= {("o.", 0)}
    assert all(p.name.endswith(".sh") for p in staging.iterdir() if p.name.startswith(WRAPPER_PREFIX))


def test_edit_large_payload_and_crlf_files(pod_sandbox: PodSandbox, scratch: Path) -> None:
    target = scratch / "crlf.txt"
    target.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    result = pod_sandbox.edit(str(target), "one\ntwo", "uno\ndos")
    assert result.error is None and result.occurrences == 1
    assert target.read_bytes() == b"uno\r\ndos\r\nthree\r\n"
    big = "z" * 100_000
    assert pod_sandbox.edit(str(target), "three", big).occurrences == 1
    assert target.read_bytes().endswith(big.encode() + b"\r\n")


async def test_async_write_edit_delete(pod_sandbox: PodSandbox, scratch: Path) -> None:
    path = f"{scratch}/a/b.txt"
    assert (await pod_sandbox.awrite(path, "alpha beta")).error is None
    assert (await pod_sandbox.aedit(path, "beta", "gamma")).occurrences == 1
    assert (await pod_sandbox.aread(path)).file_data == {"content": "alpha gamma", "encoding": "utf-8"}
    assert (await pod_sandbox.als(f"{scratch}/a")).entries is not None
    grep = await pod_sandbox.agrep("gamma", str(scratch))
    assert grep.matches == [{"path": path, "line": 1, "text": "alpha gamma"}]
    assert [m["path"] for m in (await pod_sandbox.aglob("**/*.txt", str(scratch))).matches or []] == [path]
    assert (await pod_sandbox.adelete(f"{scratch}/a")).error is None
    assert (await pod_sandbox.adelete(f"{scratch}/a")).error == f"Error: '{scratch}/a' not found"


def test_delete_refuses_the_root(pod_sandbox: PodSandbox) -> None:
    assert "refusing" in (pod_sandbox.delete("/").error or "")
    assert pod_sandbox.execute("test -d /usr").exit_code == 0


def _tagged_searches() -> list[bytes]:
    """The command lines of tagged searches still running (gnu_grep's `lkc-<tag>`), as stop_search.sh looks."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            line = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
            if b"--label=lkc-" in line or b"\0lkc-" in line:
                found.append(line)
    return found


@pytest.mark.parametrize("api", ["sync", "async"])
async def test_grep_is_stopped_at_its_time_budget(
    pod_sandbox: PodSandbox, scratch: Path, monkeypatch: pytest.MonkeyPatch, api: str
) -> None:
    """No watchdog runs beside a search in the pod: the client keeps the time and, at the budget, stops
    the search by its tag; the answer says truncated, and nothing of the search is left running."""
    monkeypatch.setattr(sandbox_files, "GREP_TIME_BUDGET", 0.5)
    fifo = scratch / "fifo"
    os.mkfifo(fifo)  # named as the root: grep blocks reading it
    started = time.monotonic()
    found = pod_sandbox.grep("needle", str(fifo)) if api == "sync" else await pod_sandbox.agrep("needle", str(fifo))
    assert (found.error, found.matches, found.truncated) == (None, [], True)
    assert time.monotonic() - started < 10
    assert _tagged_searches() == []
