"""kube/session_pass.py on its own: what it observes (cache first, the API only where the cache may lag)
and the order it acts in."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fake_kube import FakeKube, store

from agentsession_operator.kube.acting import Actor
from agentsession_operator.kube.cache import Cache, Key
from agentsession_operator.kube.scheduler import DeadlineScheduler
from agentsession_operator.kube.session_pass import Config, Rooms, SessionPass
from agentsession_operator.kube.status_writer import StatusWriter


class Sessions:
    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.forgotten: list[Key] = []
        self.soon: list[Key] = []

    def remember_session(self, key: Key, body: dict[str, Any]) -> None:
        self.cache.remember_session(key, body)

    def forget(self, key: Key) -> None:
        self.forgotten.append(key)
        self.cache.forget_session(key)

    def pass_soon(self, key: Key, cause: str, at: dt.datetime | None = None) -> None:
        self.soon.append(key)


async def _never(key: Key, at: dt.datetime) -> None:
    return None


def _pass(kube: FakeKube) -> tuple[SessionPass, Cache, Sessions]:
    cache = Cache(loaded=True)
    sessions = Sessions(cache)

    def event(obj: Any, reason: str, message: str, type_: str) -> None:
        kube.writes.append(("event", reason))

    def fence() -> None:
        return None

    actor = Actor(kube, cache, fence, event)  # type: ignore[arg-type]
    writer = StatusWriter(kube, fence, event, sessions.remember_session, lambda k, uid: sessions.forget(k))  # type: ignore[arg-type]
    rooms = Rooms(kube, cache, Config(), DeadlineScheduler(_never), sessions, actor, writer, event, fence)  # type: ignore[arg-type]
    return SessionPass(rooms), cache, sessions


async def test_a_new_session_is_judged_without_a_claim_get(make_session: Any) -> None:
    kube = FakeKube()
    kube.pools.add(("ns", "python-pool"))
    key = store(kube, make_session())
    room, _, _ = _pass(kube)
    seen = await room.observe(key, fresh=True)
    assert seen is not None and seen.claim is None and seen.pools == set()
    assert [r for r in kube.reads if r[0] == "get-claim"] == []  # no claimName: never created, nothing to read


async def test_a_session_gone_from_the_api_is_forgotten(make_session: Any) -> None:
    kube = FakeKube()
    room, _, sessions = _pass(kube)
    assert await room.observe(("ns", "demo"), fresh=True) is None
    assert sessions.forgotten == [("ns", "demo")]


async def test_a_pass_reads_a_pool_the_cache_lacks_then_creates_the_claim(make_session: Any) -> None:
    kube = FakeKube()
    kube.pools.add(("ns", "python-pool"))  # in the API, not (yet) in the cache
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    key = store(kube, make_session(spec={"warmPoolRef": {"name": "python-pool"}}, created=now))
    room, _, _ = _pass(kube)
    await room.run(key, "test", None, fresh=False)
    assert kube.writes[:2] == [("create-claim", "demo"), ("create-network-policy", "agentsession-demo")]


class _TooLarge:
    """A node agent whose checkpoint is over the bound (the image then deleted); asked again, it finds the pod
    stopping, as the real one did."""

    def __init__(self) -> None:
        self.checkpoints: list[str] = []
        self.deleted: list[str] = []

    async def reachable(self) -> bool:
        return True

    async def checkpoint(
        self, namespace: str, pod: str, name: str, restore_into: str, max_bytes: int | None = None, node: str = ""
    ) -> Any:
        from agentsession_operator.decisions.hibernate import CheckpointResult

        self.checkpoints.append(pod)
        if len(self.checkpoints) > 1:  # as the real agent answered for a pod its suspend was stopping
            return CheckpointResult(False, error="no runsc state of sandbox", not_gvisor=True)
        return CheckpointResult(True, size_bytes=1 << 40)

    async def delete(self, namespace: str, name: str) -> bool:
        self.deleted.append(name)
        return True


async def test_the_pass_after_a_hibernate_fallback_does_not_checkpoint_the_suspended_pod_again(
    make_session: Any, make_claim: Any, make_sandbox: Any
) -> None:
    """Found by the real-node test of limits.maxHibernatedSize (issue 49 item 3): a hibernate that fell back
    (over the budget, too large, failed) records why and suspends the Sandbox; its own status write brings the
    next pass, which saw the Sandbox as the watch last showed it (still Running), found no kept checkpoint, and
    asked the node agent to checkpoint the pod again while it was stopping, recording that refusal (NotGVisor,
    pod not found) over the real reason."""
    from agentsession_operator.kube.hibernation import Hibernator

    kube = FakeKube()
    spec = {"warmPoolRef": {"name": "python-pool"}, "idleTimeout": "1m", "idleAction": "Hibernate"}
    key = store(kube, make_session(spec=spec, status={"claimName": "demo"}))
    claim = make_claim(sandbox_name="demo", ready=("True", "DependenciesReady", ""), pod_ips=["127.1.0.5"])
    sandbox = make_sandbox(mode="Running")
    kube.claims[key], kube.sandboxes[key] = claim, sandbox
    room, cache, _ = _pass(kube)
    cache.pools[("ns", "python-pool")] = 1
    cache.remember_claim(key, claim)
    cache.remember_sandbox(key, sandbox)
    agents = _TooLarge()
    room.r.actor.hibernator = Hibernator(kube, agents, lambda *a: None)  # type: ignore[arg-type]

    await room.run(key, "claim MODIFIED", None, fresh=True)  # Ready: its status settled
    assert agents.checkpoints == [] and kube.sessions[key]["status"]["phase"] == "Ready"
    kube.sessions[key]["status"]["lastActivityTime"] = "2025-01-01T11:00:00Z"  # long idle since
    await room.run(key, "deadline", None, fresh=True)
    assert len(agents.checkpoints) == 1 and kube.sandboxes[key]["spec"]["operatingMode"] == "Suspended"
    # The next pass (the hibernation record's own MODIFIED event), before any watch event of the Sandbox.
    await room.run(key, "session MODIFIED", None, fresh=True)
    assert len(agents.checkpoints) == 1, "the suspended pod was checkpointed again"
    record = kube.sessions[key]["status"]["hibernation"]
    assert record["reason"] == "CheckpointTooLarge", record
