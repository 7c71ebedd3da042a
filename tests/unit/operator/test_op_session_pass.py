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
