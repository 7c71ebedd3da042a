"""python3 helper scripts (ls, grep, edit), run locally exactly as the runtime runs them."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from langchain_k8s_client import pyscripts


def run(command: str) -> str:
    proc = subprocess.run(shlex.split(command), capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode("ascii")  # always ASCII, whatever the file names


def grep(root: Path | str, pattern: str, glob: str | None = None, **kwargs: object) -> pyscripts.ScriptAnswer:
    command = pyscripts.build_grep(
        pattern,
        str(root),
        glob,
        max_count=kwargs.get("max_count"),  # type: ignore[arg-type]
        exclude_dirs=(".git",),
        confine=str(kwargs.get("confine", "")),
        time_budget=float(kwargs.get("time_budget", 20.0)),  # type: ignore[arg-type]
    )
    return pyscripts.parse_json_lines(run(command))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "src" / "a.py").write_text("needle one\nno\nneedle two\n")
    (tmp_path / "src" / "pkg" / "b.py").write_text("x needle\n")
    (tmp_path / "src" / "c.txt").write_text("needle txt")
    (tmp_path / ".git" / "objects").write_text("needle in git\n")
    (tmp_path / ".hidden" / "h.py").write_text("needle hidden\n")
    (tmp_path / "bin.dat").write_bytes(b"needle\x00binary")
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9 needle\n")
    os.symlink(tmp_path / "src" / "a.py", tmp_path / "link.py")
    return tmp_path


def hits(answer: pyscripts.ScriptAnswer, root: Path) -> list[tuple[str, int]]:
    return [(os.path.relpath(r["p"], root), r["l"]) for r in answer.records]


def test_grep_walks_everything_but_git_binaries_and_symlinks(tree: Path) -> None:
    answer = grep(tree, "needle")
    assert answer.done == {"done": 1, "trunc": 0}
    assert sorted(hits(answer, tree)) == [
        (".hidden/h.py", 1),
        ("latin1.txt", 1),
        ("src/a.py", 1),
        ("src/a.py", 3),
        ("src/c.txt", 1),
        ("src/pkg/b.py", 1),
    ]
    latin = next(r for r in answer.records if r["p"].endswith("latin1.txt"))
    assert latin["t"] == "caf\ufffd needle"


def test_grep_basename_and_path_globs(tree: Path) -> None:
    assert sorted(hits(grep(tree, "needle", "*.py"), tree)) == [
        (".hidden/h.py", 1),
        ("src/a.py", 1),
        ("src/a.py", 3),
        ("src/pkg/b.py", 1),
    ]
    assert hits(grep(tree, "needle", "src/**/*.py"), tree) == [("src/a.py", 1), ("src/a.py", 3), ("src/pkg/b.py", 1)]
    assert sorted(hits(grep(tree, "needle", "*.{txt,dat}"), tree)) == [("latin1.txt", 1), ("src/c.txt", 1)]
    assert hits(grep(tree, "needle", "[^a-b]*.py"), tree) == [(".hidden/h.py", 1)]


def test_grep_is_literal_and_supports_newline_alternatives(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("a.*b\naxxb\n$(x) [y]\n")
    assert hits(grep(tmp_path, "a.*b"), tmp_path) == [("f", 1)]
    assert hits(grep(tmp_path, "$(x) [y]"), tmp_path) == [("f", 3)]
    assert hits(grep(tmp_path, "axxb\n[y]"), tmp_path) == [("f", 2), ("f", 3)]


def test_grep_caps_and_flags_truncation(tree: Path) -> None:
    capped = grep(tree, "needle", max_count=2)
    assert len(capped.records) == 3  # one past the cap tells "more exist"
    assert capped.done == {"done": 1, "trunc": 1}
    assert grep(tree, "needle", time_budget=0.0).done == {"done": 1, "trunc": 1}


def test_grep_single_file_missing_path_and_confinement(tree: Path) -> None:
    assert hits(grep(tree / "src" / "a.py", "two"), tree) == [("src/a.py", 3)]
    assert grep(tree / "nope", "x").error == "path_not_found"
    assert grep(tree / "src", "needle", confine=str(tree / "other")).error == "invalid_path"


def test_grep_non_utf8_names_round_trip(tmp_path: Path) -> None:
    name = os.fsdecode(b"bad-\xff.txt")
    (tmp_path / name).write_text("needle")
    [record] = grep(tmp_path, "needle").records
    assert record["p"] == f"{tmp_path}/{name}"  # a lone surrogate, usable as a path again


def test_ls_reports_names_types_sizes(tree: Path) -> None:
    answer = pyscripts.parse_json_lines(run(pyscripts.build_ls(str(tree / "src"), "")))
    entries = sorted(pyscripts.ls_entries(answer), key=lambda e: e.name)
    assert [(e.name, e.is_dir) for e in entries] == [("a.py", False), ("c.txt", False), ("pkg", True)]
    assert entries[0].size == len("needle one\nno\nneedle two\n")
    assert entries[0].modified_at is not None and entries[0].modified_at.endswith("+00:00")
    for path, error in ((tree / "nope", "path_not_found"), (tree / "bin.dat", "not_a_directory")):
        assert pyscripts.parse_json_lines(run(pyscripts.build_ls(str(path), ""))).error == error
    assert pyscripts.parse_json_lines(run(pyscripts.build_ls(str(tree), str(tree / "src")))).error == "invalid_path"


def edit(path: Path, old: str, new: str, *, replace_all: bool = False, confine: str = "") -> dict[str, object]:
    payload = pyscripts.edit_payload(str(path), old, new, replace_all=replace_all, confine=confine)
    return dict(json.loads(run(pyscripts.build_edit(pyscripts.encode_payload(payload)))))


def test_edit_semantics(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("apple\nbanana\napple\n")
    assert edit(target, "apple", "pear") == {"error": "multiple_occurrences", "count": 2}
    assert edit(target, "kiwi", "pear") == {"error": "string_not_found"}
    assert edit(target, "apple", "pear", replace_all=True) == {"count": 2}
    assert target.read_text() == "pear\nbanana\npear\n"
    assert edit(tmp_path / "none", "a", "b") == {"error": "file_not_found"}
    assert edit(tmp_path, "a", "b") == {"error": "not_a_file"}
    (tmp_path / "bin").write_bytes(b"\xff\xfe")
    assert edit(tmp_path / "bin", "a", "b") == {"error": "not_a_text_file"}
    assert edit(target, "pear", "x", confine=str(tmp_path / "jail")) == {"error": "invalid_path"}


def test_edit_keeps_crlf_line_endings(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_bytes(b"a\r\nb\r\nc\r\n")
    assert edit(target, "a\nb", "x\ny") == {"count": 1}
    assert target.read_bytes() == b"x\r\ny\r\nc\r\n"


def test_edit_from_a_staged_payload_removes_it(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")
    staged = tmp_path / "payload"
    staged.write_bytes(pyscripts.edit_payload(str(target), "old", "new", replace_all=False, confine=""))
    assert json.loads(run(pyscripts.build_edit(str(staged)))) == {"count": 1}
    assert target.read_text() == "new"
    assert not staged.exists()


def test_expand_braces() -> None:
    assert pyscripts.expand_braces("*.{py,txt}") == ["*.py", "*.txt"]
    assert pyscripts.expand_braces("{a,{b,c}}x") == ["ax", "bx", "cx"]
    assert pyscripts.expand_braces("{solo}.py") == ["{solo}.py"]
    assert pyscripts.expand_braces("{open") == ["{open"]
    with pytest.raises(ValueError):
        pyscripts.expand_braces("{a,b}" * 10)


def test_parse_json_lines_separates_kinds() -> None:
    answer = pyscripts.parse_json_lines('{"n": 1}\n\nnot json\n[1]\n{"error": "x"}\n{"done": 1}\n')
    assert answer.records == [{"n": 1}]
    assert answer.garbage == ["not json", "[1]"]
    assert answer.error == "x"
    assert answer.done == {"done": 1}
