"""benchmarks/results.py: every table's provenance on file, and docs/performance.md's blocks equal to it."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import results

DOC = Path(__file__).parents[3] / "docs" / "performance.md"


def test_a_record_keeps_the_commit_the_machine_and_every_sample(tmp_path: Path) -> None:
    record = results.Record.start("bench_x", rounds=2, size=3)
    for value in (1.0, 3.0):
        record.sample("execute", "ours", value)
        record.sample("execute", "raw", value / 2)
    path = record.finish("ms", ratios={"ours / raw": 2.0}, directory=tmp_path)
    body = json.loads(path.read_text())
    assert body["commit"] and isinstance(body["on_main"], bool) and body["machine"]["cores"] >= 1
    assert body["samples"] == {"execute": {"ours": [1.0, 3.0], "raw": [0.5, 1.5]}}
    assert body["medians"] == {"execute": {"ours": 2.0, "raw": 1.0}} and body["params"] == {"size": 3}
    block = results.markdown(body)
    assert "| execute | 2.00 | 1.00 |" in block and "ours / raw: **2.00**" in block
    doc = f"intro\n{results.MARKER}bench_x -->\n{block}\n{results.END}\n"
    assert results.stale_blocks(doc, tmp_path) == []
    assert results.stale_blocks(doc.replace("2.00", "1.90"), tmp_path) == ["bench_x"]


def test_every_results_block_of_performance_md_is_its_file() -> None:
    assert results.stale_blocks(DOC.read_text()) == [], "regenerate: python -m benchmarks.results NAME"
