"""tests/stage.py: the counts each stage line of make test / .ci/run shows come from the runner's closing line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import stage


def test_pytest_quiet_closing_line() -> None:
    out = "....F\n=== short test summary info ===\nFAILED a::b\n1 failed, 4 passed, 2 skipped, 1 xfailed in 12.34s\n"
    assert stage.counts(out) == {"failed": 1, "passed": 4, "skipped": 2, "xfailed": 1}


def test_pytest_verbose_closing_line_and_errors() -> None:
    out = "== 3 passed, 1 error, 5 deselected in 0.5s (0:00:00) ==\n"
    assert stage.counts(out) == {"passed": 3, "errors": 1, "deselected": 5}


def test_node_test_runner() -> None:
    assert stage.counts("# tests 34\n# pass 33\n# fail 1\n# skipped 0\n") == {"passed": 33, "failed": 1, "skipped": 0}


def test_a_line_that_only_looks_like_a_count_is_not_one() -> None:
    assert stage.counts("building 3 images in 4.0s\n") == {}


def test_summary_ends_with_the_plain_closing_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stage, "STAGES_FILE", tmp_path / "stages.tsv")
    assert stage.run("ok", ["sh", "-c", "echo '2 passed, 1 skipped in 1.0s'"]) == 0
    assert stage.run("bad", ["sh", "-c", "echo '1 failed, 3 passed in 1.0s'; exit 1"]) == 1
    lines = stage.summary().splitlines()
    assert lines[0].split()[:2] == ["ok", "ok"] and "FAILED (exit 1)" in lines[1]
    assert lines[-1] == "total: 5 passed, 1 failed, 1 skipped"
