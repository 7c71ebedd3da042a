"""kube/hibernation.py: a deleted session's image deleted through the node agents, bounded when they are down."""

from __future__ import annotations

import asyncio
from typing import Any

from agentsession_api import phases
from agentsession_operator.decisions import hibernate as h
from agentsession_operator.kube.hibernation import Hibernator

OWN = h.checkpoint_name("s", "u-1")  # a session's image is named after its name and UID
SESSION = {
    "metadata": {"namespace": "ns", "name": "s", "uid": "u-1"},
    "status": {"hibernation": {"hibernated": True, "checkpoint": OWN}},
}


class Agents:
    """The node agents' answers to delete, one per try (the last repeated)."""

    def __init__(self, *answers: h.DeleteOutcome) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, str]] = []

    async def delete_outcome(self, namespace: str, name: str) -> h.DeleteOutcome:
        self.asked.append((namespace, name))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    async def delete(self, namespace: str, name: str) -> bool:
        return (await self.delete_outcome(namespace, name)).deleted


class Kube:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    async def patch_session_status(self, namespace: str, name: str, status: dict[str, Any], **_: Any) -> None:
        self.patches.append(status)


def hibernator(agents: Agents, kube: Kube | None = None) -> tuple[Hibernator, list[tuple[str, str]], list[float]]:
    events: list[tuple[str, str]] = []
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    def spawn(work: Any) -> None:
        asyncio.get_running_loop().create_task(work)

    hib = Hibernator(
        kube or Kube(),
        agents,  # type: ignore[arg-type]
        lambda obj, reason, message, type_: events.append((reason, type_)),
        spawn=spawn,
        sleep=sleep,
    )
    return hib, events, slept


async def test_the_agent_answering_deletes_the_image_once() -> None:
    agents = Agents(h.DeleteOutcome(deleted=True, asked=1, unreachable=0))
    hib, events, slept = hibernator(agents)
    assert await hib.forget_checkpoint(SESSION, OWN, still_there=False)
    assert agents.asked == [("ns", OWN)] and events == [] and slept == []


async def test_agents_down_give_up_after_the_bounded_tries_with_a_warning() -> None:
    agents = Agents(h.DeleteOutcome(deleted=False, asked=0, unreachable=0))
    hib, events, slept = hibernator(agents)
    assert not await hib.forget_checkpoint(SESSION, OWN, still_there=False)
    assert len(agents.asked) == len(h.FORGET_DELAYS) + 1 and slept == list(h.FORGET_DELAYS)
    assert events == [(h.EVENT_CHECKPOINT_NOT_DELETED, "Warning")]


async def test_an_agent_back_after_a_retry_deletes_it() -> None:
    agents = Agents(h.DeleteOutcome(False, 1, 1), h.DeleteOutcome(True, 1, 0))
    kube = Kube()
    hib, events, slept = hibernator(agents, kube)
    assert await hib.forget_checkpoint(SESSION, OWN, still_there=True)
    assert slept == [h.FORGET_DELAYS[0]] and events == []
    assert kube.patches == [{"hibernation": h.forgotten_record(OWN)}]  # an expired one: status says so


async def test_forget_soon_runs_once_per_session_and_only_with_a_kept_checkpoint() -> None:
    agents = Agents(h.DeleteOutcome(True, 1, 0))
    hib, _, _ = hibernator(agents)
    assert hib.forget_soon(SESSION, still_there=True)
    assert not hib.forget_soon(SESSION, still_there=True)  # under way already
    assert not hib.forget_soon({"metadata": {"namespace": "ns", "name": "t", "uid": "u-2"}, "status": {}})
    await asyncio.sleep(0)
    assert agents.asked == [("ns", OWN)]


async def test_without_node_agents_nothing_is_tried() -> None:
    hib = Hibernator(Kube(), None, lambda *a: None, spawn=lambda w: None)
    assert not hib.forget_soon(SESSION)


async def test_the_reconciler_deletes_a_hibernated_sessions_image_when_it_is_deleted() -> None:
    """The DELETED event (or a relist lacking it) starts the delete, from the body the cache had."""
    from agentsession_operator.kube.reconciler import Config, Reconciler

    rec = Reconciler(Kube(), Config(node_agent="agentsession-system/app=agent"))  # type: ignore[arg-type]
    agents = Agents(h.DeleteOutcome(True, 1, 0))
    rec.hibernator.agents = agents  # type: ignore[assignment]
    rec.cache.remember_session(("ns", "s"), SESSION)
    try:
        rec.session_deleted(("ns", "s"), "u-1")
        await asyncio.gather(*rec._background)
        assert agents.asked == [("ns", OWN)]
        assert ("ns", "s") not in rec.cache.sessions
    finally:
        await rec.scheduler.stop()


async def test_an_image_over_the_policys_bound_is_deleted_and_the_session_falls_back() -> None:
    from agentsession_operator.decisions.actions import HibernateSandbox

    class Checkpointing(Agents):
        async def reachable(self) -> bool:
            return True

        async def checkpoint(
            self, namespace: str, pod: str, name: str, restore_into: str, max_bytes: int | None = None, node: str = ""
        ) -> h.CheckpointResult:
            return h.CheckpointResult(True, size_bytes=2048)

    agents = Checkpointing(h.DeleteOutcome(True, 1, 0))
    kube = Kube()
    hib, events, _ = hibernator(agents, kube)
    log = type("Log", (), {"info": lambda *a, **k: None})()
    await hib.hibernate(HibernateSandbox("sb", "pod", OWN, {}, max_bytes=1024), SESSION, log)
    assert kube.patches[0]["hibernation"]["reason"] == phases.REASON_CHECKPOINT_TOO_LARGE
    assert agents.asked == [("ns", OWN)] and events == [("HibernateFallback", "Warning")]


def _session(name: str, uid: str, **extra: Any) -> dict[str, Any]:
    session: dict[str, Any] = {"metadata": {"namespace": "ns", "name": name, "uid": uid}, "status": {}}
    session["metadata"].update(extra.pop("metadata", {}))
    session["status"].update(extra.pop("status", {}))
    return session


def test_an_image_is_swept_only_when_no_live_session_owns_it() -> None:
    """Owned: any listed session's image, waking or hibernating or mid-checkpoint (status not yet written).
    Swept: a gone session's, an ended one's (expired or being deleted). Kept: an unlisted namespace's."""
    live = _session("a", "u-a")
    expired = _session("b", "u-b", status={"phase": phases.Phase.EXPIRED.value})
    deleting = _session("c", "u-c", metadata={"deletionTimestamp": "2026-12-04T00:00:00Z"})
    images = [("ns", h.checkpoint_name(n, u)) for n, u in [("a", "u-a"), ("b", "u-b"), ("c", "u-c"), ("gone", "u-g")]]
    images.append(("other", h.checkpoint_name("a", "u-a")))
    swept = h.images_to_sweep(images, {"ns": [live, expired, deleting]})
    assert swept == [images[1], images[2], images[3]]
    # Same name, a new session (another UID): the old one's image is not the new one's.
    assert h.images_to_sweep([images[0]], {"ns": [_session("a", "u-new")]}) == [images[0]]


class SweepKube:
    def __init__(self, sessions: dict[str, list[dict[str, Any]]], failing: frozenset[str] = frozenset()) -> None:
        self.sessions, self.failing = sessions, failing
        self.listed: list[str | None] = []

    async def list_sessions(self, namespace: str | None = None, selector: str | None = None) -> list[dict[str, Any]]:
        self.listed.append(namespace)
        if namespace in self.failing:
            raise RuntimeError("apiserver down")
        return self.sessions.get(str(namespace), [])


class ListingAgents(Agents):
    def __init__(self, listed: list[tuple[str, str]]) -> None:
        super().__init__(h.DeleteOutcome(deleted=True, asked=1, unreachable=0))
        self.listed = listed

    async def images(self) -> list[tuple[str, str]]:
        return self.listed


async def test_the_sweep_deletes_gone_sessions_images_in_the_namespaces_it_leads() -> None:
    """Led namespaces only; a namespace whose sessions could not be listed keeps its images."""
    kept, gone = h.checkpoint_name("a", "u-a"), h.checkpoint_name("gone", "u-g")
    agents = ListingAgents([("ns", kept), ("ns", gone), ("broken", gone), ("not-mine", gone)])
    kube = SweepKube({"ns": [_session("a", "u-a")]}, failing=frozenset({"broken"}))
    hib, _, _ = hibernator(agents, kube)  # type: ignore[arg-type]
    swept = await hib.sweep(lambda ns: ns != "not-mine")
    assert swept == [("ns", gone)] and agents.asked == [("ns", gone)]
    assert sorted(str(ns) for ns in kube.listed) == ["broken", "ns"]
    without_agents = Hibernator(kube, None, lambda obj, reason, message, type_: None)
    assert await without_agents.sweep(lambda ns: True) == []


async def test_the_image_restores_only_into_the_pod_the_wake_creates() -> None:
    """Issue 49 item 1: the node agent names in the image the one pod it restores into. agent-sandbox names
    the woken pod after the Sandbox, whatever the checkpointed pod was called (a warm pool's pod)."""
    from agentsession_operator.decisions.actions import HibernateSandbox

    asked: list[tuple[str, str]] = []

    class Checkpointing(Agents):
        async def reachable(self) -> bool:
            return True

        async def checkpoint(
            self, namespace: str, pod: str, name: str, restore_into: str, max_bytes: int | None = None, node: str = ""
        ) -> h.CheckpointResult:
            asked.append((pod, restore_into))
            return h.CheckpointResult(True, size_bytes=10)

    hib, events, _ = hibernator(Checkpointing(h.DeleteOutcome(True, 1, 0)), Kube())
    log = type("Log", (), {"info": lambda *a, **k: None})()
    await hib.hibernate(HibernateSandbox("sandbox-1", "pool-pod-x7k2", OWN, {}), SESSION, log)
    assert asked == [("pool-pod-x7k2", "sandbox-1")] and events == [("Hibernated", "Normal")]
