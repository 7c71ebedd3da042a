"""Issue 49 item 4: hibernations must not hold everyone's pass slots (kube/fairness.py, kube/hibernation.py).

A hibernation's pass waits on the node agent for a whole checkpoint (seconds to minutes; the agent takes one
at a time per node). Awaited inside the pass's slot, sixteen of them held every slot (PASS_SLOTS = 16) and
every other namespace's creates and reaps waited for the checkpoints to end. These tests drive the reconciler's
real slot machinery, Actor and Hibernator; only the node agent is a stand-in that answers when told.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_kube import FakeKube, store

from agentsession_operator.decisions import hibernate as h
from agentsession_operator.decisions.actions import HibernateSandbox
from agentsession_operator.infra.logs import logger
from agentsession_operator.kube.fairness import PASS_SLOTS
from agentsession_operator.kube.node_agent import AgentSelector, NodeAgents
from agentsession_operator.kube.reconciler import Config, Reconciler

Make = Callable[..., dict[str, Any]]
BOUND = 5.0  # seconds any wait here may take: every one ends in milliseconds when the rule holds


class SlowAgents:
    """Node agents whose checkpoints finish only when `done` is set; counts how many are asked at once."""

    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.at_once = 0
        self.most_at_once = 0
        self.asked: list[tuple[str, str]] = []

    async def reachable(self) -> bool:
        return True

    async def checkpoint(self, namespace: str, pod: str, name: str, *_: Any, **__: Any) -> h.CheckpointResult:
        self.asked.append((namespace, name))
        self.at_once += 1
        self.most_at_once = max(self.most_at_once, self.at_once)
        try:
            await self.done.wait()
        finally:
            self.at_once -= 1
        return h.CheckpointResult(True, size_bytes=1000)

    async def delete(self, namespace: str, name: str) -> bool:
        return True


@pytest.fixture
async def reconciler() -> Any:
    kube = FakeKube()
    rec = Reconciler(kube, Config(node_agent="agentsession-nodeagent/app=agent"))  # type: ignore[arg-type]
    rec.cache.loaded = True
    rec.hibernator.agents = SlowAgents()  # type: ignore[assignment]
    yield rec
    rec.hibernator.agents.done.set()  # type: ignore[union-attr]
    await rec.scheduler.stop()


def hibernate_in_passes(rec: Reconciler, namespace: str) -> None:
    """The passes of `namespace`'s sessions decide what an idle Hibernate session's pass decides: checkpoint,
    record, suspend (the decision itself: test_op_hibernate*.py); every other pass is the real one."""
    real = rec.session_pass.run

    async def run(key: tuple[str, str], cause: str, lag: float | None, fresh: bool) -> None:
        if key[0] != namespace:
            return await real(key, cause, lag, fresh)
        session = {"metadata": {"namespace": key[0], "name": key[1], "uid": f"uid-{key[1]}"}, "status": {}}
        rec.kube.sandboxes.setdefault(key, {"metadata": {"namespace": key[0], "name": key[1]}, "spec": {}})  # type: ignore[attr-defined]
        action = HibernateSandbox(
            key[1],
            f"{key[1]}-pod",
            h.checkpoint_name(key[1], f"uid-{key[1]}"),
            {"spec": {"operatingMode": "Suspended"}},
        )
        await rec.actor.act(action, session, None, logger(), None)

    rec.session_pass.run = run  # type: ignore[method-assign]


async def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


async def test_sixteen_hibernations_leave_another_namespaces_create_its_turn(
    reconciler: Reconciler, make_session: Make
) -> None:
    """Attack: tenant A's sixteen sessions go idle together with idleAction Hibernate. While the node agent
    checkpoints them, tenant B creates a session: its claim must be created at once, not after the checkpoints."""
    rec, kube = reconciler, reconciler.kube
    hibernate_in_passes(rec, "team-a")
    agents: SlowAgents = rec.hibernator.agents  # type: ignore[assignment]
    sleepers = [asyncio.create_task(rec.reconcile(("team-a", f"s{i}"), "idle deadline")) for i in range(PASS_SLOTS)]
    await wait_for(lambda: len(agents.asked) + rec.slots.waiting() >= 1, "no hibernation started")
    await asyncio.sleep(0.05)  # every sleeper has taken what it takes (a slot, or a place in a queue)
    kube.pools.add(("team-b", "python-pool"))  # type: ignore[attr-defined]
    key = store(kube, make_session(name="b", namespace="team-b"))  # type: ignore[attr-defined]
    try:
        await asyncio.wait_for(rec.reconcile(key, "session ADDED"), BOUND)
    except TimeoutError:
        pytest.fail(f"tenant B's pass waited {BOUND} s behind {PASS_SLOTS} checkpoints holding every pass slot")
    assert ("team-b", "b") in kube.claims  # type: ignore[attr-defined]
    agents.done.set()
    await asyncio.wait_for(asyncio.gather(*sleepers), BOUND)
    assert rec.slots.busy == 0 and rec.slots.waiting() == 0


async def test_one_namespace_asks_the_node_agents_for_a_few_checkpoints_at_a_time(reconciler: Reconciler) -> None:
    """Attack: a tenant's hundred hibernations at once would queue a hundred requests at the agents (each a
    connection held for a whole checkpoint): another tenant's hibernation then waits behind all of them."""
    rec = reconciler
    hibernate_in_passes(rec, "team-a")
    agents: SlowAgents = rec.hibernator.agents  # type: ignore[assignment]
    sleepers = [asyncio.create_task(rec.reconcile(("team-a", f"s{i}"), "idle deadline")) for i in range(40)]
    await wait_for(lambda: agents.at_once >= 1, "no hibernation started")
    await asyncio.sleep(0.05)
    assert agents.most_at_once <= 2, f"{agents.most_at_once} checkpoints of one namespace asked of the agents at once"
    agents.done.set()
    await asyncio.wait_for(asyncio.gather(*sleepers), BOUND)
    assert len(agents.asked) == 40


class BusyOnce(NodeAgents):
    """The real NodeAgents, its HTTP replaced: the node's agent is taking another checkpoint (another
    replica's, or one a restarted operator asked for) the first `busy` times it is asked."""

    def __init__(self, busy: int) -> None:
        super().__init__(Lister(), AgentSelector("agentsession-nodeagent", "app=agent"), Path("/dev/null"))
        self.busy = busy
        self.calls = 0

    async def _ask(self, agent: Any, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.calls += 1
        if self.calls <= self.busy:
            return 503, {"error": "busy: this node's agent is taking another checkpoint", "busy": True}
        return 200, {"sizeBytes": 1000}


class Lister:
    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        status = {"podIP": "10.0.1.1", "conditions": [{"type": "Ready", "status": "True"}]}
        return [{"spec": {"nodeName": "node-a"}, "status": status}]


async def test_a_busy_agent_is_asked_again_not_given_up_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy agent answers at once (the node takes one checkpoint at a time); the operator waits its turn
    and asks again, within its bound, instead of suspending the session as Suspend on the first refusal."""
    agents = BusyOnce(busy=2)
    monkeypatch.setattr("agentsession_operator.kube.node_agent.BUSY_RETRY", 0.01)
    result = await asyncio.wait_for(agents.checkpoint("team-a", "pod", "s-1", "s", node="node-a"), BOUND)
    assert result.ok, result.error
    assert agents.calls == 3
