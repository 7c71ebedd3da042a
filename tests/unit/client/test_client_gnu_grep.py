"""GNU grep (scripts/grep.sh) answers as the python grep does, run locally as the runtime runs it."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devcluster import prereqs
from langchain_k8s_client import gnu_grep, probe, pyscripts

pytestmark = pytest.mark.skipif(
    b"GNU" not in subprocess.run(["grep", "-V"], capture_output=True, check=False).stdout, reason="no GNU grep"
)


def run(command: str, cwd: Path | None = None) -> bytes:
    proc = subprocess.run(shlex.split(command), capture_output=True, timeout=60, check=False, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def run_like_runtime(command: str) -> tuple[bytes, bytes, int]:
    proc = subprocess.run(shlex.split(command), capture_output=True, timeout=60, check=False, start_new_session=True)
    return proc.stdout, proc.stderr, proc.returncode


def gnu(root: Path, pattern: str, cap: int = 10_001, tag: str | None = "t0") -> list[tuple[str, int, str]]:
    alternatives = [p for p in pattern.split("\n") if p] or [pattern]
    command = gnu_grep.build_gnu_grep(alternatives, str(root), exclude_dirs=(".git",), cap=cap, tag=tag)
    records, status = gnu_grep.parse_gnu_grep(run(command).decode("utf-8"))  # strict, as the runtime
    assert status is None
    return [(r.path, r.line, r.text) for r in records]


def python(root: Path, pattern: str) -> list[tuple[str, int, str]]:
    command = pyscripts.build_grep(pattern, str(root), None, max_count=None, exclude_dirs=(".git",), confine="")
    found = pyscripts.grep_matches(pyscripts.parse_json_lines(run(command).decode("ascii")))
    return sorted(found, key=gnu_grep.GREP_ORDER)  # as grep() orders them


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for d in ("src/pkg/deep", "src/z", ".git", ".hidden", "a b"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    (tmp_path / "src" / "a.py").write_text("needle one\nno\nneedle two\r\n")
    (tmp_path / "src" / "pkg" / "b.py").write_text("x needle:y\n")
    (tmp_path / "src" / "pkg" / "deep" / "c").write_text("needle\n")
    (tmp_path / "src" / "z" / "d").write_text("needle é\n")
    (tmp_path / "src" / "zz").write_text("needle")
    (tmp_path / ".git" / "objects").write_text("needle in git\n")
    (tmp_path / ".hidden" / "h.py").write_text("needle hidden\n")
    (tmp_path / "a b" / "sp ace").write_text("$(x) needle [y]\n")
    (tmp_path / "bin.dat").write_bytes(b"needle\x00binary")
    os.symlink(tmp_path / "src" / "a.py", tmp_path / "link.py")
    return tmp_path


@pytest.mark.parametrize("pattern", ["needle", "needle two\nx needle", "$(x) needle [y]", "", "absent"])
def test_same_records_in_the_same_order(tree: Path, pattern: str) -> None:
    assert gnu(tree, pattern) == python(tree, pattern)


def test_a_single_file_and_no_tag(tree: Path) -> None:
    assert gnu(tree / "src" / "a.py", "two", tag=None) == python(tree / "src" / "a.py", "two")


def test_cap_bounds_the_output(tree: Path) -> None:
    assert len(gnu(tree, "needle", cap=3)) == 3


def test_a_missing_root_is_an_error_without_records(tmp_path: Path) -> None:
    command = gnu_grep.build_gnu_grep(["x"], str(tmp_path / "nope"), exclude_dirs=(), cap=5, tag=gnu_grep.new_tag())
    stdout, stderr, code = run_like_runtime(command)
    assert (stdout, code) == (b"", 0) and b"No such file" in stderr  # the client asks the python version


def test_no_match_is_silent(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("hay\n")
    command = gnu_grep.build_gnu_grep(["x"], str(tmp_path), exclude_dirs=(), cap=5, tag=gnu_grep.new_tag())
    for _ in range(20):
        assert run_like_runtime(command) == (b"", b"", 0)


def _blocked_search(tmp_path: Path, tag: str, cap: int = 5, shell: str = "sh") -> subprocess.Popen[bytes]:
    """A search that finds its match, then blocks reading a FIFO named on the command line, started as
    the runtime starts a command."""
    (tmp_path / "f").write_text("needle\n")
    if not (tmp_path / "fifo").exists():
        os.mkfifo(tmp_path / "fifo")
    command = gnu_grep.build_gnu_grep(["needle"], str(tmp_path / "f"), exclude_dirs=(), cap=cap, tag=tag)
    command += " " + shlex.quote(str(tmp_path / "fifo"))
    command = command.replace("sh -c", f"{'busybox sh' if shell == 'busybox' else shell} -c", 1)
    return subprocess.Popen(shlex.split(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _tagged(tag: str, program: bytes = b"") -> bool:
    """Whether a process whose command line carries the tag runs (as scripts/stop_search.sh looks), `program`
    its first word's end ("grep": the search's grep has started)."""
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            line = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
            if f"lkc-{tag}".encode() in line and line.split(b"\0", 1)[0].endswith(program):
                return True
    return False


def _wait_grep(search: subprocess.Popen[bytes], tag: str) -> None:
    deadline = time.monotonic() + 10
    while not _tagged(tag, b"grep"):  # bounded: the search's grep starts (its FIFO blocks it then)
        assert time.monotonic() < deadline and search.poll() is None
        time.sleep(0.01)


def test_a_stop_kills_the_whole_search_and_keeps_what_it_found(tmp_path: Path) -> None:
    tag = gnu_grep.new_tag()
    search = _blocked_search(tmp_path, tag)
    _wait_grep(search, tag)
    assert run_like_runtime(gnu_grep.build_stop_search(tag)) == (b"", b"", 0)
    stdout, _ = search.communicate(timeout=10)
    assert search.returncode in gnu_grep.GREP_KILLED
    assert gnu_grep.parse_gnu_grep(stdout.decode()) == ([], None)  # grep's output was still in its buffer
    assert not _tagged(tag)  # grep and its shell gone, head with them


def test_a_stop_leaves_another_search_and_itself_alone(tmp_path: Path) -> None:
    tags = [gnu_grep.new_tag(), gnu_grep.new_tag()]
    searches = []
    for name, tag in zip("ab", tags, strict=True):
        (tmp_path / name).mkdir()
        searches.append(_blocked_search(tmp_path / name, tag))
        _wait_grep(searches[-1], tag)
    try:
        assert run_like_runtime(gnu_grep.build_stop_search(tags[0])) == (b"", b"", 0)  # its own grep not killed
        searches[0].communicate(timeout=10)
        assert searches[0].returncode in gnu_grep.GREP_KILLED and searches[1].poll() is None
        assert run_like_runtime(gnu_grep.build_stop_search(tags[0])) == (b"", b"", 0)  # nothing left to stop
    finally:
        for search, tag in zip(searches, tags, strict=False):
            run_like_runtime(gnu_grep.build_stop_search(tag))  # a kill of the shell alone leaves grep blocked
            search.communicate(timeout=10)


def test_a_stop_refuses_a_tag_that_is_not_a_plain_word() -> None:
    for tag in ("", "a", "a b", "$(x)", "a]b", "x" * 65):
        with pytest.raises(ValueError, match="search tag"):
            gnu_grep.build_stop_search(tag)


@pytest.mark.parametrize("shell", sorted(prereqs.COMMANDS[prereqs.SHELLS]))
def test_a_stop_ends_a_search_whose_head_is_done(tmp_path: Path, shell: str) -> None:
    assert shutil.which(shell), f"{shell} is missing: python -m devcluster.prereqs {prereqs.SHELLS} installs it"
    # `head` stops at the cap; grep, blocked on a FIFO, writes nothing more, so no SIGPIPE ends it: the
    # script still waits for it (the whole pipeline), and the stop still ends the search.
    tag = gnu_grep.new_tag()
    search = _blocked_search(tmp_path, tag, cap=1, shell=shell)
    _wait_grep(search, tag)
    run_like_runtime(gnu_grep.build_stop_search(tag))
    search.communicate(timeout=10)
    assert search.returncode in gnu_grep.GREP_KILLED


def test_non_utf8_output_is_refused_by_the_runtime(tmp_path: Path) -> None:
    # The runtime fails such a request; the client then runs the python version.
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9 needle\n")
    command = gnu_grep.build_gnu_grep(["needle"], str(tmp_path), exclude_dirs=(), cap=5)
    with pytest.raises(UnicodeDecodeError):
        run(command).decode("utf-8")


def test_what_gnu_grep_may_serve() -> None:
    assert gnu_grep.gnu_grep_fits("/w", (".git",), None, "")
    assert not gnu_grep.gnu_grep_fits("/w", (".git",), "*.py", "")
    assert not gnu_grep.gnu_grep_fits("/w", (".git",), None, "/w")
    assert not gnu_grep.gnu_grep_fits("/w/.git", (".git",), None, "")
    assert not gnu_grep.gnu_grep_fits("/w", ("*.egg",), None, "")


def test_probe_reports_gnu_grep(tmp_path: Path) -> None:
    info = probe.parse_probe(run(probe.build_probe(), cwd=tmp_path).decode())
    assert info.gnu_grep is (shutil.which("grep") is not None)


def test_parsing_a_record_cut_short_and_the_status() -> None:
    assert gnu_grep.parse_gnu_grep("/a/b\x001:x\n/a/c\x002:y") == ([gnu_grep.GrepRecord("/a/b", 1, "x")], None)
    assert gnu_grep.parse_gnu_grep("/a/b\x001:x\n@E0\n") == ([gnu_grep.GrepRecord("/a/b", 1, "x")], 0)
    assert gnu_grep.parse_gnu_grep("@E2\n") == ([], 2)


def test_parsing_a_file_name_with_a_line_break() -> None:
    stdout = "/d/z\x001:z\n/d/a\nb\x003:t\n/d/c/x\x001:c\n@E0\n"
    assert gnu_grep.parse_gnu_grep(stdout) == (
        [
            gnu_grep.GrepRecord("/d/a\nb", 3, "t"),
            gnu_grep.GrepRecord("/d/c/x", 1, "c"),
            gnu_grep.GrepRecord("/d/z", 1, "z"),
        ],
        0,
    )


_NAMES = st.sampled_from(["a", "b", "a-b", "a.b", "ab", "b0", "z", "A", "_", "a b"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(_NAMES, max_size=3), _NAMES, st.integers(1, 3)), max_size=30))
def test_both_parsers_sort_by_path_keeping_each_files_lines_in_order(files: list[tuple[list[str], str, int]]) -> None:
    seen: set[str] = set()
    lines = []
    for parts, name, count in files:
        path = "/r/" + "/".join([*(f"{p}.d" for p in parts), name])
        if path in seen:
            continue
        seen.add(path)
        lines += [f"{path}\x00{n}:t{n}\n" for n in range(1, count + 1)]
    stdout = "".join(lines)
    fast = [gnu_grep.GrepRecord(p, int(k), t) for p, k, t in gnu_grep.gnu_grep_rows(stdout) or []]
    slow, _ = gnu_grep.parse_gnu_grep_slowly(stdout)
    assert fast == slow == sorted(fast, key=lambda r: (r.path, r.line))
