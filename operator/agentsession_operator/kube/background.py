"""Tasks started and never awaited (Events, debounced refreshes, orphan collection): each is kept
referenced until it ends, so the event loop cannot drop it half-way."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class Background:
    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Coroutine[Any, Any, None], loop: asyncio.AbstractEventLoop | None = None) -> None:
        task = (loop or asyncio.get_running_loop()).create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
