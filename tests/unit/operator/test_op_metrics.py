"""The operator's own metrics the shipped alerts need (issue 27): leadership and the memory limit."""

from __future__ import annotations

import math
from pathlib import Path

from prometheus_client import REGISTRY

from agentsession_operator.infra import metrics


def _value(name: str) -> float:
    got = REGISTRY.get_sample_value(name)
    assert got is not None, f"{name} is not exported"
    return got


def test_leadership_is_read_at_every_scrape() -> None:
    leading = [True]
    metrics.report_leadership(lambda: leading[0])
    assert _value("agentsession_leader") == 1.0
    leading[0] = False  # the Lease lapsed: no event, the next scrape already says so
    assert _value("agentsession_leader") == 0.0


def test_memory_limit_from_cgroup_v2_and_v1(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    v2.write_text("268435456\n")
    assert metrics.memory_limit((v2, v1)) == 268435456.0
    v2.write_text("max\n")
    assert math.isnan(metrics.memory_limit((v2, v1)))
    v1.write_text("536870912\n")
    assert metrics.memory_limit((tmp_path / "absent", v1)) == 536870912.0
    v1.write_text(str(9223372036854771712))  # cgroup v1's "unlimited"
    assert math.isnan(metrics.memory_limit((tmp_path / "absent", v1)))
    assert math.isnan(metrics.memory_limit((tmp_path / "absent",)))


def test_the_memory_limit_gauge_reads_this_process_cgroup_at_every_scrape() -> None:
    """The exported value is this machine's own limit, read where the shipped code reads it (NaN: none)."""
    limit = metrics.memory_limit()
    exported = _value("agentsession_memory_limit_bytes")
    assert (math.isnan(exported) and math.isnan(limit)) or exported == limit, (exported, limit)
    try:
        metrics.MEMORY_LIMIT.set_function(lambda: metrics.memory_limit((Path("/nonexistent/memory.max"),)))
        assert math.isnan(_value("agentsession_memory_limit_bytes"))
    finally:
        metrics.MEMORY_LIMIT.set_function(metrics.memory_limit)  # as shipped
