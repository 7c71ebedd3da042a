"""Python's cyclic garbage collector, made cheap for a cache of thousands of objects.

CPython's full collection traverses every tracked container, and the cache holds several per session
(its body, claim, Sandbox and NetworkPolicy as dicts), so a full collection takes long at scale; the
operator's churn (event bodies that live across an await survive into the oldest generation) triggers
one whenever the survivors since the last grow by a quarter of the heap, stalling whatever frame it
lands in.

Here, once a minute: collect what is young, then freeze everything alive (gc.freeze: the collector
never traverses frozen objects again; reference counting still frees them when they go). Every
tenth round unfreezes first, so a cycle among frozen objects that became garbage is still found,
within ten minutes. The cached bodies are plain JSON trees without cycles: they never need the
collector at all.
"""

from __future__ import annotations

import asyncio
import gc

PERIOD = 60.0  # seconds between rounds
FULL_EVERY = 10  # a full collection (unfrozen) every this many rounds


def collect_round(round_: int) -> None:
    """One round: young objects collected, then everything alive frozen (all of it, every FULL_EVERY)."""
    if round_ % FULL_EVERY == 0:
        gc.unfreeze()
    gc.collect()
    gc.freeze()


async def collect_forever(period: float = PERIOD) -> None:
    round_ = 0
    while True:
        await asyncio.sleep(period)
        round_ += 1
        collect_round(round_)
