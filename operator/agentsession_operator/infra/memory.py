"""Python's cyclic garbage collector, made cheap for a cache of thousands of objects.

CPython's full collection traverses every tracked container: at 10,000 sessions the cache alone is
about 320,000 (one session, its claim, Sandbox and NetworkPolicy as dicts), 363 ms per full
collection on this machine, and the operator's churn (event bodies that live across an await
survive into the oldest generation) triggers one whenever the survivors since the last grow by a
quarter of the heap. py-spy on the operator at 5,000 sessions caught 0.86 s of one 20 s window in a
single tiny frame (a request body's serialization): such a collection.

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
