"""kube/missing_pools.py: a warm pool the cache lacks costs one GET, however many passes wait on it (issue 53
item 3: at a take-over every waiting session is passed at once)."""

from __future__ import annotations

import asyncio

from agentsession_operator.kube.missing_pools import KEPT, MissingPools


class Pools:
    def __init__(self, *present: tuple[str, str]) -> None:
        self.present = set(present)
        self.asked: list[tuple[str, str]] = []
        self.gate = asyncio.Event()
        self.gate.set()

    async def exists(self, namespace: str, name: str) -> bool:
        self.asked.append((namespace, name))
        await self.gate.wait()
        return (namespace, name) in self.present


async def test_the_passes_waiting_on_one_pool_share_one_get() -> None:
    pools = Pools()
    pools.gate.clear()
    missing = MissingPools(pools.exists)
    waiting = [asyncio.ensure_future(missing.exists("ns", "gone")) for _ in range(1000)]
    await asyncio.sleep(0)
    pools.gate.set()
    assert await asyncio.gather(*waiting) == [False] * 1000
    assert await missing.exists("ns", "gone") is False  # found missing a moment ago: not asked again
    assert pools.asked == [("ns", "gone")]


async def test_a_missing_pool_is_asked_again_after_the_window_or_once_it_appeared() -> None:
    now = [0.0]
    pools = Pools()
    missing = MissingPools(pools.exists, window=30, clock=lambda: now[0])
    assert await missing.exists("ns", "p") is False
    now[0] = 29.0
    assert await missing.exists("ns", "p") is False and len(pools.asked) == 1
    now[0] = 31.0
    pools.present.add(("ns", "p"))
    assert await missing.exists("ns", "p") is True and len(pools.asked) == 2
    assert await missing.exists("ns", "p") is True and len(pools.asked) == 3  # a found pool is never believed
    pools.present.clear()
    assert await missing.exists("ns", "p") is False
    missing.appeared(("ns", "p"))  # its watch event
    assert await missing.exists("ns", "p") is False and len(pools.asked) == 5


async def test_a_failed_get_fails_every_pass_that_shared_it_and_is_not_remembered() -> None:
    calls = []

    async def broken(namespace: str, name: str) -> bool:
        calls.append(name)
        raise ConnectionError("API down")

    missing = MissingPools(broken)
    results = await asyncio.gather(missing.exists("ns", "p"), missing.exists("ns", "p"), return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results) and calls == ["p"]
    await asyncio.gather(missing.exists("ns", "p"), return_exceptions=True)
    assert calls == ["p", "p"]


async def test_what_is_remembered_is_bounded() -> None:
    pools = Pools()
    missing = MissingPools(pools.exists)
    for i in range(KEPT + 10):
        await missing.exists("ns", f"p{i}")
    assert len(missing._missing) <= KEPT
