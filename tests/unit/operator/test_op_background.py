"""kube/background.py: a background task stays referenced until it ends."""

from __future__ import annotations

import asyncio

from agentsession_operator.kube.background import Background


async def test_tasks_are_kept_until_done() -> None:
    background = Background()
    gate = asyncio.Event()

    async def work() -> None:
        await gate.wait()

    background.spawn(work())
    assert len(background.tasks) == 1
    gate.set()
    await asyncio.gather(*background.tasks)
    await asyncio.sleep(0)
    assert background.tasks == set()
