"""benchmarks/timeline.py: a create -> Ready split into its steps (bench_fairness's table of who holds B's time)."""

from __future__ import annotations

import threading

from benchmarks import timeline


def test_a_sample_splits_into_one_time_per_step_summing_to_the_whole() -> None:
    line = timeline.Timeline.__new__(timeline.Timeline)  # its watch threads are not needed to split
    line.seen, line._lock = {}, threading.Lock()
    for step, at in zip(timeline.STEPS[:-1], (10.2, 10.5, 11.0, 11.1), strict=True):
        line.seen[("b", step)] = at
    split = line.split("b", 10.0, 11.4)
    assert split is not None and list(split) == list(timeline.STEPS)
    assert abs(sum(split.values()) - 1.4) < 1e-9
    assert line.split("never-seen", 10.0, 11.4) is None
