"""Leader election (kube/election/lease.py, kube/election/leader.py) against a fake Lease API and a fake clock.

The fake API keeps resourceVersions and answers a stale write with Conflict, like the API server, so
races between candidates are decided the way they are on a cluster.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from agentsession_operator.kube.election import lease as rules
from agentsession_operator.kube.election.leader import Conflict, LeaderElector
from agentsession_operator.kube.reconciler import NotLeader, Reconciler

T = rules.Timing(lease_duration=10.0, renew_deadline=7.0, retry_period=2.0)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def wall(self) -> dt.datetime:
        return dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=self.t)


class FakeLeases:
    def __init__(self) -> None:
        self.obj: dict[str, Any] | None = None
        self.rv = 0
        self.down = False
        self.writes = 0

    def _check(self) -> None:
        if self.down:
            raise ConnectionError("API server unreachable")

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._check()
        return copy.deepcopy(self.obj)

    async def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check()
        if self.obj is not None:
            raise Conflict("exists")
        return self._store(body)

    async def replace(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check()
        assert self.obj is not None
        if body["metadata"].get("resourceVersion") != self.obj["metadata"]["resourceVersion"]:
            raise Conflict("stale resourceVersion")
        return self._store(body)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        self.writes += 1
        self.obj = copy.deepcopy(body)
        self.obj["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(self.obj)


def elector(api: FakeLeases, clock: Clock, me: str, **kwargs: Any) -> LeaderElector:
    return LeaderElector(api, "ns", "lease", me, T, clock=clock, wall=clock.wall, **kwargs)


# ---- the pure rules ------------------------------------------------------------------------------
def test_timing_must_fence_before_a_standby_may_take_over() -> None:
    with pytest.raises(ValueError):
        rules.Timing(lease_duration=10, renew_deadline=10, retry_period=2)
    with pytest.raises(ValueError):
        rules.Timing(lease_duration=10, renew_deadline=7, retry_period=8)


@pytest.mark.parametrize(
    ("holder", "unchanged_for", "expected"),
    [
        ("me", 0.0, rules.Step.RENEW),
        ("me", 99.0, rules.Step.RENEW),
        (None, 0.0, rules.Step.ACQUIRE),
        ("other", 0.0, rules.Step.WAIT),
        ("other", 9.99, rules.Step.WAIT),
        ("other", 10.0, rules.Step.ACQUIRE),
    ],
)
def test_next_step(holder: str | None, unchanged_for: float, expected: rules.Step) -> None:
    record = rules.Record(holder=holder, lease_duration=10.0)
    assert rules.next_step(record, "me", unchanged_for) is expected


def test_absent_lease_is_created() -> None:
    assert rules.next_step(None, "me", 0.0) is rules.Step.CREATE


def test_holds_only_until_the_renew_deadline() -> None:
    assert rules.holds(100.0, 106.9, T)
    assert not rules.holds(100.0, 107.0, T)
    assert not rules.holds(None, 0.0, T)


def test_record_round_trip_and_microtime() -> None:
    clock = Clock()
    spec = rules.spec_for(rules.Step.CREATE, None, "me", T, clock.wall())
    assert str(spec["renewTime"]).endswith("Z") and len(str(spec["renewTime"]).split(".")[1]) == 7
    record = rules.record_from({"metadata": {"resourceVersion": "7"}, "spec": spec})
    assert (record.holder, record.lease_duration, record.transitions, record.resource_version) == ("me", 10.0, 0, "7")
    assert record.renew_time == clock.wall()
    taken = rules.spec_for(rules.Step.ACQUIRE, record, "other", T, clock.wall())
    assert taken["leaseTransitions"] == 1
    renewed = rules.spec_for(rules.Step.RENEW, record, "me", T, clock.wall() + dt.timedelta(seconds=2))
    assert renewed["acquireTime"] == spec["acquireTime"] and renewed["renewTime"] != spec["renewTime"]


# ---- the elector -----------------------------------------------------------------------------------
async def test_first_candidate_creates_and_the_second_waits() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    assert await a.try_once()
    assert not await b.try_once()
    assert a.is_leader() and not b.is_leader()
    assert api.obj is not None and api.obj["spec"]["holderIdentity"] == "a"


async def test_standby_takes_over_only_after_a_full_lease_duration_of_silence() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    await a.try_once()
    await b.try_once()  # b first sees a's record now
    # a is SIGKILLed: it never renews again.
    for _ in range(4):
        clock.t += 2.0
        assert not await b.try_once(), f"took over after {clock.t - 1000:.0f} s"
    clock.t += 2.0  # 10 s after b first saw the record
    assert await b.try_once()
    assert b.is_leader()
    # The old leader's view: it stopped acting 7 s after its last renewal, before b could take over.
    assert not a.is_leader()
    assert api.obj is not None and api.obj["spec"]["leaseTransitions"] == 1


async def test_a_renewing_leader_is_never_displaced() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    for _ in range(30):
        assert await a.try_once()
        assert not await b.try_once()
        assert a.is_leader() and not b.is_leader()
        clock.t += 2.0


async def test_never_two_leaders_at_any_instant() -> None:
    """A leader whose renewals fail (API unreachable for it) and a standby polling all along."""
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    await a.try_once()
    cut = FakeLeases()
    cut.down = True
    a.api = cut  # a is partitioned from the API server; b is not
    for _ in range(200):
        clock.t += 0.25
        with pytest.raises(ConnectionError):
            await a.try_once()
        await b.try_once()
        assert not (a.is_leader() and b.is_leader()), f"two leaders at t={clock.t - 1000}"
    assert b.is_leader() and not a.is_leader()


async def test_racing_candidates_on_a_free_lease_yield_one_leader() -> None:
    api, clock = FakeLeases(), Clock()
    candidates = [elector(api, clock, name) for name in "abc"]
    await candidates[0].try_once()
    await candidates[0].release()
    # All three read the free Lease before any of them writes: the resourceVersion decides.
    reads = [await c.api.get("ns", "lease") for c in candidates]
    assert all(r == reads[0] for r in reads)
    results = [await c.try_once() for c in candidates]
    assert results.count(True) == 1


async def test_release_hands_over_at_the_next_poll() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = elector(api, clock, "a"), elector(api, clock, "b")
    await a.try_once()
    assert not await b.try_once()
    await a.stop()
    assert not a.is_leader()
    assert api.obj is not None and api.obj["spec"]["holderIdentity"] is None
    clock.t += 2.0
    assert await b.try_once()


async def test_release_leaves_someone_elses_lease_alone() -> None:
    api, clock = FakeLeases(), Clock()
    a = elector(api, clock, "a")
    await a.try_once()
    assert api.obj is not None
    api.obj["spec"]["holderIdentity"] = "intruder"
    await a.release()
    assert api.obj["spec"]["holderIdentity"] == "intruder"


async def test_leader_that_sees_another_holder_stops_at_once() -> None:
    api, clock = FakeLeases(), Clock()
    a = elector(api, clock, "a")
    await a.try_once()
    assert api.obj is not None
    api.obj["spec"]["holderIdentity"] = "b"
    api.obj["metadata"]["resourceVersion"] = "99"
    assert not await a.try_once()
    assert not a.is_leader()


async def test_on_started_leading_runs_once_per_term() -> None:
    api, clock = FakeLeases(), Clock()
    started: list[float] = []

    async def on_started() -> None:
        started.append(clock.t)

    a = elector(api, clock, "a", on_started_leading=on_started)
    for _ in range(3):
        await a.try_once()
        await a._notify()
        clock.t += 2.0
    assert started == [1000.0]
    api.down = True
    clock.t += 8.0
    await a._notify()  # renewals failed past the deadline: leadership lapses
    api.down = False
    await a.try_once()
    await a._notify()
    assert len(started) == 2 and a.transitions == 2


async def test_a_lapse_between_two_rounds_counts_as_a_new_term() -> None:
    """A throttled round outlives the renew deadline (passes are refused meanwhile) and then renews:
    _notify sees leader -> leader, yet on_started_leading must run again to redo the refused passes."""
    api, clock = FakeLeases(), Clock()
    started: list[float] = []
    a = elector(api, clock, "a", on_started_leading=lambda: started.append(clock.t))
    await a.try_once()
    await a._notify()
    slow_get = api.get

    async def throttled_get(namespace: str, name: str) -> dict[str, Any] | None:
        clock.t += 8.0  # waited out Retry-After past the renew deadline
        assert not a.is_leader()
        return await slow_get(namespace, name)

    api.get = throttled_get  # type: ignore[method-assign]
    await a.try_once()
    api.get = slow_get  # type: ignore[method-assign]
    await a.try_once()  # the next round is quick: leader again before _notify looks
    assert a.is_leader()
    await a._notify()
    assert started == [1000.0, 1008.0] and a.transitions == 2


# ---- the reconciler's gate ---------------------------------------------------------------------------
class NoKube:
    """Any API call fails the test: a standby must not even read."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a standby called Kube.{name}")


async def test_standby_reconciler_neither_reads_nor_writes() -> None:
    reconciler = Reconciler(NoKube())  # type: ignore[arg-type]
    reconciler.is_leader = lambda: False
    await reconciler.reconcile(("ns", "s"), cause="test")
    claim = {"metadata": {"namespace": "ns", "name": "c", "ownerReferences": [{"kind": "AgentSession", "name": "x"}]}}
    assert await reconciler.collect_orphan(claim) is False
    with pytest.raises(NotLeader):
        reconciler._fence()


async def test_take_over_schedules_every_known_session() -> None:
    reconciler = Reconciler(NoKube())  # type: ignore[arg-type]
    for name in ("a", "b", "c"):
        reconciler.cache.sessions[("ns", name)] = {"metadata": {"namespace": "ns", "name": name}}
    await reconciler.take_over()
    assert len(reconciler.scheduler) == 3


async def test_take_over_returns_at_once_and_collects_orphans_in_the_background() -> None:
    """The elector awaits take_over() before its next renewal: a slow API must not hold it there."""
    import asyncio

    release = asyncio.Event()
    deleted: list[str] = []

    class SlowKube:
        async def get_session(self, namespace: str, name: str) -> None:
            await release.wait()  # an API server answering very slowly
            return None

        async def delete_claim(self, namespace: str, name: str, uid: str | None = None) -> bool:
            deleted.append(name)
            return True

    reconciler = Reconciler(SlowKube())  # type: ignore[arg-type]
    reconciler.cache.sessions[("ns", "live")] = {"metadata": {"namespace": "ns", "name": "live"}}
    orphan = {
        "metadata": {
            "namespace": "ns",
            "name": "gone-claim",
            "uid": "c1",
            "ownerReferences": [
                {"kind": "AgentSession", "apiVersion": "agentsession.dev/v1alpha1", "name": "gone", "uid": "u1"}
            ],
        }
    }
    reconciler.cache.claims[("ns", "gone-claim")] = orphan
    await asyncio.wait_for(reconciler.take_over(), timeout=1)  # did not wait for the slow GET
    assert reconciler.scheduler.due(("ns", "live")) is not None
    release.set()
    for _ in range(20):
        await asyncio.sleep(0)
    assert deleted == ["gone-claim"]


# ---- the lease's own client and timeout (a stalled or throttled API must not cost the Lease) ----
def test_a_round_is_bounded_under_the_renew_deadline() -> None:
    assert T.round_timeout == 3.0  # 7 - 2 * 2: a stalled round ends in time for one more before the hold ends
    for timing in (
        rules.Timing(10, 7, 2),
        rules.Timing(10, 3, 2),
        rules.Timing(2.5, 1.75, 0.5),
        rules.Timing(15, 10, 2),
    ):
        assert timing.retry_period <= timing.round_timeout < timing.renew_deadline


async def test_a_stalled_lease_request_is_given_up_and_the_leader_keeps_the_lease() -> None:
    """One lease read never answers (a stalled connection). Before, the round waited for the operator
    client's 30 s timeout: the leader's hold (renew deadline) ran out and its passes were refused. Now
    the round is given up after round_timeout and the next one renews before the hold ends."""
    import asyncio
    import time

    timing = rules.Timing(lease_duration=2.5, renew_deadline=1.75, retry_period=0.5)  # rounds of 0.75 s at most
    api = FakeLeases()
    stall = asyncio.Event()
    gets = 0
    real_get = api.get

    async def get(namespace: str, name: str) -> dict[str, Any] | None:
        nonlocal gets
        gets += 1
        if gets == 2:
            await stall.wait()  # never set: the answer never comes
        return await real_get(namespace, name)

    api.get = get  # type: ignore[method-assign]
    e = LeaderElector(api, "ns", "lease", "a", timing)
    e.start()
    try:
        start = time.monotonic()
        while not e.is_leader():
            assert time.monotonic() - start < 1, "never became leader"
            await asyncio.sleep(0.01)
        lost = 0
        while time.monotonic() - start < 2.0:  # the stalled round, and the ones after it
            lost += not e.is_leader()
            await asyncio.sleep(0.01)
        assert gets >= 3 and lost == 0 and e.transitions == 1
    finally:
        await e.stop()


async def test_the_lease_client_has_its_own_gate_and_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 429 on a reconcile request closes the operator client's gate (Retry-After, up to 30 s); lease
    requests go out all the same, with the lease's timeout rather than the operator's 30 s."""
    import asyncio

    from agentsession_operator.kube import transport
    from agentsession_operator.kube.api import ApiClient, ApiException, Credentials
    from agentsession_operator.kube.election.leader import KubeLeaseAPI

    sent: list[Any] = []

    async def request(self: Any, method: str, url: str, *, timeout: Any = None, **kw: Any) -> Any:
        sent.append((method, timeout))
        raise ApiException(status=404, reason="Not Found", body=b"{}")

    monkeypatch.setattr(ApiClient, "request", request)
    credentials = Credentials(server="https://127.0.0.1:1")
    operator_client = ApiClient(credentials)
    operator_gate = transport.install(operator_client)
    operator_gate.close_for(30)  # throttled: the operator's own requests wait 30 s
    lease = KubeLeaseAPI.connect(T.round_timeout, credentials)
    try:
        assert await asyncio.wait_for(lease.get("ns", "lease"), timeout=1) is None
        assert sent == [("GET", 3.0)] and lease.gate is not operator_gate
        assert lease.api_client.user_agent.endswith(" leader-election")  # its requests can be told apart
    finally:
        await lease.close()
        await operator_client.close()
