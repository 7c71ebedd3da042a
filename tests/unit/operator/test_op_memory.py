"""infra/memory.py: what is alive gets frozen (never traversed again); garbage cycles are still collected."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from agentsession_operator.infra import memory


class Node:
    def __init__(self) -> None:
        self.me: Any = self  # a cycle: only the collector frees it


def test_rounds_freeze_the_living_and_a_full_round_frees_frozen_cycles() -> None:
    try:
        cached = [{"metadata": {"name": str(i)}} for i in range(1000)]
        memory.collect_round(1)
        assert gc.get_freeze_count() >= len(cached)  # the cache is never traversed again
        node = Node()
        gone = weakref.ref(node)
        memory.collect_round(2)  # frozen while alive
        del node
        memory.collect_round(3)
        assert gone() is not None  # garbage now, but frozen: the collector does not see it
        memory.collect_round(memory.FULL_EVERY)  # unfrozen first
        assert gone() is None
    finally:
        gc.unfreeze()
