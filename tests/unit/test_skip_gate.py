"""The skip gate (tests/skip_gate.py): which skips fail a run, and what it tells to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import skip_gate


def test_the_declared_list_allows_the_node_kind_skips_only() -> None:
    patterns = skip_gate.load()
    skips = [
        skip_gate.Skip("a", "needs the real node (make test runs it with NODE=real)"),
        skip_gate.Skip("b", "kwok node only: exercises the simulated node"),
        skip_gate.Skip("c", "shellcheck is not installed (make lint needs it)"),
        skip_gate.Skip("d", "upstream python runtime not found: no /x/main.py"),
    ]
    assert [s.nodeid for s in skip_gate.undeclared(skips, patterns)] == ["c", "d"]


def test_the_report_names_each_skip_and_the_line_that_would_declare_it() -> None:
    lines = skip_gate.report([skip_gate.Skip("t.py::x", "lua5.1 (x) missing")])
    assert "t.py::x: lua5.1 (x) missing" in "\n".join(lines)
    assert lines[-1] == r"  ^lua5\.1\ \(x\)\ missing$"


def test_reason_is_read_from_pytest_longrepr() -> None:
    assert skip_gate.reason_of(("f.py", 3, "Skipped: no GNU grep")) == "no GNU grep"


def test_a_bad_pattern_names_its_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "allowed.txt"
    path.write_text("# comment\n\nok\n(unclosed\n")
    with pytest.raises(ValueError, match=r"allowed.txt:4: not a regular expression"):
        skip_gate.load(path)
