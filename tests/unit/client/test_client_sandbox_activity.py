"""sandbox_activity.ActivityHooks: one report per outermost operation, a veto stops it, async never blocks."""

from __future__ import annotations

import threading

import pytest

from langchain_k8s_client.sandbox_activity import ActivityHooks


def test_reports_once_for_nested_operations() -> None:
    seen: list[float | None] = []
    hooks = ActivityHooks(on_activity=seen.append)
    with hooks.operation(30.0), hooks.operation(None):  # BaseSandbox's read calling execute
        pass
    with hooks.operation(None):
        pass
    assert seen == [30.0, None]


def test_a_raising_hook_refuses_the_operation() -> None:
    def refuse(_: float | None) -> None:
        raise RuntimeError("expired")

    ran = []
    with pytest.raises(RuntimeError, match="expired"), ActivityHooks(on_activity=refuse).operation(None):
        ran.append(True)
    assert ran == []
    with ActivityHooks().operation(None):  # no hooks: nothing reported, the block runs
        ran.append(True)
    assert ran == [True]


async def test_async_prefers_its_own_hook() -> None:
    sync_seen: list[float | None] = []
    async_seen: list[float | None] = []

    async def areport(busy: float | None) -> None:
        async_seen.append(busy)

    hooks = ActivityHooks(on_activity=sync_seen.append, aon_activity=areport)
    async with hooks.aoperation(5.0), hooks.aoperation(None):
        pass
    assert (sync_seen, async_seen) == ([], [5.0])


async def test_async_runs_a_sync_hook_in_a_worker_thread() -> None:
    threads: list[threading.Thread] = []
    hooks = ActivityHooks(on_activity=lambda _: threads.append(threading.current_thread()))
    async with hooks.aoperation(None):
        pass
    assert len(threads) == 1 and threads[0] is not threading.current_thread()
