"""The I/O shell (kube/) against an in-memory API: the reconciler's coalescing, backoff and orphan
collection, a whole pass, and the deadline scheduler. Seconds, not a 5-minute e2e run."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from fake_kube import FakeKube, store

from agentsession_operator.decisions.actions import PROGRESS_DELAY
from agentsession_operator.handlers.state import OperatorState
from agentsession_operator.kube.reconciler import MAX_RETRY_DELAY, Reconciler
from agentsession_operator.kube.resync import PRIMED_KINDS
from agentsession_operator.kube.scheduler import DeadlineScheduler
from agentsession_operator.kube.session_records import SessionRecord

Make = Callable[..., dict[str, Any]]
Key = tuple[str, str]


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
async def reconciler(kube: FakeKube) -> Any:
    rec = Reconciler(kube)  # type: ignore[arg-type]
    rec.cache.loaded = True  # what prime() does at startup (tested on its own below)
    yield rec
    await rec.scheduler.stop()


_store = store


# ---- one pass, end to end over the fake ----------------------------------------------------------
async def test_a_new_session_s_only_status_write_is_ready(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    """A session Ready within PROGRESS_DELAY has one status write: Ready, with everything (its claim's
    name, every condition). Nothing before it: not Pending while the claim is created, not Provisioning."""
    kube.pools.add(("ns", "python-pool"))
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # the reconciler reads the real clock
    key = _store(kube, make_session(spec={"warmPoolRef": {"name": "python-pool"}, "ttl": "2h"}, created=now))
    await reconciler.reconcile(key, cause="test")
    # The session's NetworkPolicy goes in with the claim; no status yet.
    assert kube.writes == [("create-claim", "demo"), ("create-network-policy", "agentsession-demo")]
    assert "status" not in kube.sessions[key]
    at = reconciler.scheduler.due(key)  # the first status is due PROGRESS_DELAY after the creation
    assert at is not None and at - dt.datetime.now(dt.UTC) < PROGRESS_DELAY + dt.timedelta(seconds=1)
    await reconciler.reconcile(key, cause="claim seen")  # the claim's watch event: nothing to write yet
    assert len(kube.writes) == 2
    claim_key = ("ns", "demo")
    kube.claims[claim_key]["status"] = {
        "sandbox": {"name": "demo", "podIPs": ["10.0.0.9"]},
        "conditions": [{"type": "Ready", "status": "True", "reason": "SandboxReady", "message": "ready"}],
    }
    reconciler.cache.remember_claim(claim_key, copy.deepcopy(kube.claims[claim_key]))
    await reconciler.reconcile(key, cause="claim MODIFIED")
    assert kube.writes[2:] == [("status", "demo")]
    status = kube.sessions[key]["status"]
    assert status["phase"] == "Ready" and status["claimName"] == "demo" and status["readyAt"]
    types = {c["type"]: c["status"] for c in status["conditions"]}
    assert types["ClaimCreated"] == "True" and types["NetworkIsolated"] == "True"
    await reconciler.reconcile(key, cause="again")  # nothing changed: nothing is written (level-triggered)
    assert len(kube.writes) == 3


async def test_provisioning_progress_waits_then_is_written_from_the_cache(
    kube: FakeKube, reconciler: Reconciler, make_session: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new session not Ready after PROGRESS_DELAY (counted from its creation) gets its first status then:
    Provisioning with agent-sandbox's latest step, written by a deferred pass that reads no session from
    the API."""
    kube.pools.add(("ns", "python-pool"))
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    key = _store(kube, make_session(spec={"warmPoolRef": {"name": "python-pool"}, "idleTimeout": "8h"}, created=now))
    await reconciler.reconcile(key, cause="test")
    claim_key = ("ns", "demo")
    ready = {"type": "Ready", "status": "False", "reason": "DependenciesNotReady", "message": "Pod is Pending"}
    kube.claims[claim_key]["status"] = {"sandbox": {"name": "demo"}, "conditions": [ready]}
    reconciler.cache.remember_claim(claim_key, copy.deepcopy(kube.claims[claim_key]))
    writes = len(kube.writes)
    await reconciler.reconcile(key, cause="claim MODIFIED")
    assert kube.writes[writes:] == []  # not yet
    at = reconciler.scheduler.due(key)
    assert at is not None and at - dt.datetime.now(dt.UTC) < PROGRESS_DELAY + dt.timedelta(seconds=1)
    later = at + dt.timedelta(milliseconds=1)
    monkeypatch.setattr("agentsession_operator.kube.clock.now", lambda: later)
    kube.reads.clear()
    await reconciler._on_deadline(key, at)
    assert kube.writes[writes:] == [("status", "demo")] and kube.reads == []
    status = kube.sessions[key]["status"]
    condition = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert status["phase"] == "Provisioning" and status["claimName"] == "demo"
    assert condition["message"] == "Pod is Pending" and status["sandboxName"] == "demo"


async def test_a_new_session_creates_its_claim_without_reading_it_first(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    kube.pools.add(("ns", "python-pool"))
    key = _store(kube, make_session(spec={"warmPoolRef": {"name": "python-pool"}}))
    await reconciler.reconcile(key, cause="test")
    assert ("create-claim", "demo") in kube.writes
    assert [
        r for r in kube.reads if r[0] == "get-claim"
    ] == []  # no GET before the create: nothing was ever created for it


async def test_a_claim_that_exists_anyway_is_read_and_reported(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    kube.pools.add(("ns", "python-pool"))
    key = _store(kube, make_session(spec={"warmPoolRef": {"name": "python-pool"}}))
    kube.claims[("ns", "demo")] = {"metadata": {"name": "demo", "namespace": "ns", "uid": "foreign"}}
    await reconciler.reconcile(key, cause="test")
    await reconciler.reconcile(key, cause="rescheduled")
    assert kube.writes.count(("create-claim", "demo")) == 1  # then read, never created again
    assert ("get-claim", "demo") in kube.reads
    assert kube.sessions[key]["status"]["phase"] == "Failed"


async def test_a_409_on_create_with_no_claim_there_is_retried_soon_not_at_the_next_deadline(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    """An AlreadyExists for a claim a GET then cannot find (a 409 injected by a proxy, or a claim going
    away): the pass asks for another one soon, and the TTL deadline the same pass schedules after it
    must not replace that (it did: the session waited minutes without a claim)."""
    kube.pools.add(("ns", "python-pool"))
    now = dt.datetime.now(dt.UTC)
    key = _store(
        kube,
        make_session(
            spec={"warmPoolRef": {"name": "python-pool"}, "ttl": "2h"}, created=now.strftime("%Y-%m-%dT%H:%M:%SZ")
        ),
    )
    create = kube.create_claim

    async def conflict_once(claim: dict[str, Any]) -> dict[str, Any] | None:
        kube.create_claim = create  # type: ignore[method-assign]
        kube.writes.append(("create-claim", claim["metadata"]["name"]))
        return None  # 409 AlreadyExists, yet nothing is there

    kube.create_claim = conflict_once  # type: ignore[method-assign]
    await reconciler.reconcile(key, cause="test")
    due = reconciler.scheduler.due(key)
    assert due is not None and (due - now).total_seconds() < 5  # soon, not in 2 h
    await reconciler.reconcile(key, cause="again")
    assert kube.writes.count(("create-claim", "demo")) == 2 and ("ns", "demo") in kube.claims


async def test_a_stale_event_after_the_session_was_deleted_creates_no_claim(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    """Its claim was garbage-collected with it; a MODIFIED event still queued brings the old body."""
    kube.pools.add(("ns", "python-pool"))
    body = make_session(spec={"warmPoolRef": {"name": "python-pool"}}, status={"phase": "Ready", "claimName": "demo"})
    key = ("ns", "demo")
    body["metadata"].setdefault("resourceVersion", "1")
    reconciler.cache.remember_session(key, body)  # the event's body; the API has no such session any more
    await reconciler.reconcile(key, cause="session MODIFIED")
    assert not any(w[0] == "create-claim" for w in kube.writes)
    assert key not in reconciler.cache.sessions


async def _session_event(reconciler: Reconciler, type_: str | None, body: dict[str, Any]) -> None:
    import kopf

    from agentsession_operator.handlers import events

    await events.session_event(
        type=type_, body=kopf.Body(copy.deepcopy(body)), memo=kopf.Memo(state=OperatorState(reconciler=reconciler))
    )


async def test_a_stale_event_handled_after_the_deleted_event_creates_no_claim(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    """A body older than the session's first status (no claimName) arriving after its DELETED event was
    handled (a relist, a late trigger): no claim, no GET of the session, not cached again."""
    kube.pools.add(("ns", "python-pool"))
    body = make_session()
    body["metadata"]["resourceVersion"] = "1"
    await _session_event(reconciler, "DELETED", body)
    await _session_event(reconciler, "MODIFIED", body)
    assert not any(w[0] == "create-claim" for w in kube.writes)
    assert ("ns", "demo") not in reconciler.cache.sessions


async def test_a_deletion_seen_while_a_pass_awaits_the_api_creates_no_claim(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    """A pass for a new session (no status yet) waits on the API (here: the pool read); the session's
    DELETED event is handled meanwhile. The pass had the body from before the deletion: before the
    tombstone it created the claim all the same (for the garbage collector to remove)."""
    pool_read = asyncio.Event()
    release = asyncio.Event()

    async def slow_pool(namespace: str, name: str) -> dict[str, Any] | None:
        pool_read.set()
        await release.wait()
        return {"metadata": {"name": name}}

    kube.get_warm_pool = slow_pool  # type: ignore[method-assign]
    key = _store(kube, make_session())
    body = copy.deepcopy(kube.sessions[key])
    reconciler.cache.remember_session(key, body)
    passing = asyncio.create_task(reconciler.reconcile(key, cause="claim DELETED"))
    await pool_read.wait()
    del kube.sessions[key]  # deleted in the API; its DELETED event is handled while the pass waits
    await _session_event(reconciler, "DELETED", body)
    release.set()
    await passing
    assert kube.writes == [] and kube.reads == []
    assert key not in reconciler.cache.sessions and reconciler.scheduler.due(key) is None


async def test_a_status_write_answered_404_ends_the_session_for_good(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    """The window left: the session's own event, handled after the session was deleted (kopf hands an
    object's events over one at a time, so its DELETED waits behind it). The claim is built from the
    session read live (the cache keeps no env values), and that GET tells: no claim is created, the
    session is forgotten, and its late DELETED event changes nothing. Before, the claim was created and
    only the status write's 404 told."""
    kube.pools.add(("ns", "python-pool"))
    body = make_session()
    body["metadata"]["resourceVersion"] = "1"  # in no API: deleted before its ADDED event is handled
    await _session_event(reconciler, "ADDED", body)
    assert ("get-session", "demo") in kube.reads
    assert not any(w[0] in ("create-claim", "status") for w in kube.writes), kube.writes
    assert ("ns", "demo") not in reconciler.cache.sessions
    await _session_event(reconciler, "DELETED", body)
    assert not any(w[0] == "create-claim" for w in kube.writes)
    assert ("ns", "demo") not in reconciler.cache.sessions


async def test_a_missing_pool_waits_without_a_claim(kube: FakeKube, reconciler: Reconciler, make_session: Make) -> None:
    key = _store(kube, make_session())
    await reconciler.reconcile(key, cause="test")
    assert not any(w[0] == "create-claim" for w in kube.writes)
    assert kube.sessions[key]["status"]["conditions"][0]["reason"] == "WarmPoolNotFound"


async def test_policies_are_loaded_before_the_first_pass(
    kube: FakeKube, reconciler: Reconciler, make_session: Make, make_policy: Make
) -> None:
    """Startup fills the policy cache from a live list: a session's first pass, even one that comes
    before the policies' watch events, must not create a claim a policy forbids."""
    kube.pools.add(("ns", "python-pool"))
    kube.policies = [
        make_policy("rules", {"limits": {"allowedWarmPools": ["other"]}}),
        make_policy("elsewhere", {}, namespace="team-x"),
    ]
    await reconciler.prime(("ns",))
    assert list(reconciler.cache.policies) == ["ns"]
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    key = _store(kube, make_session(created=now))
    await reconciler.reconcile(key, cause="listed")
    assert not any(w[0] == "create-claim" for w in kube.writes)
    assert kube.sessions[key]["status"]["phase"] == "Failed"


# ---- coalescing ------------------------------------------------------------------------------------
async def test_triggers_during_a_pass_coalesce_into_one_more_pass(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    key = _store(kube, make_session())
    passes: list[str] = []
    original = reconciler.session_pass.run

    async def counting(key: Key, cause: str, lag: float | None, fresh: bool) -> None:
        passes.append(cause)
        await original(key, cause, lag, fresh)

    reconciler.session_pass.run = counting  # type: ignore[method-assign]
    kube.gate = asyncio.Event()
    first = asyncio.create_task(reconciler.reconcile(key, cause="first"))
    await asyncio.sleep(0.01)  # the first pass now waits inside its status write
    for cause in ("second", "third", "fourth"):
        await reconciler.reconcile(key, cause=cause)  # returns at once: a pass is running
    kube.gate.set()
    await first
    assert passes == ["first", "fourth"]  # one more pass for all three, with the latest cause


# ---- backoff ------------------------------------------------------------------------------------
async def test_a_failing_pass_retries_with_exponential_backoff(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    key = _store(kube, make_session())
    kube.fail_status_writes = 3
    delays = []
    for _ in range(3):
        before = dt.datetime.now(dt.UTC)
        await reconciler.reconcile(key, cause="test")
        due = reconciler.scheduler.due(key)
        assert due is not None
        delays.append(round((due - before).total_seconds()))
    assert delays == [1, 2, 4]
    await reconciler.reconcile(key, cause="test")  # succeeds: the failure count starts over
    assert (reconciler.records.get(key) or SessionRecord()).failures == 0
    reconciler.records.of(key).failures = 20
    kube.fail_status_writes = 1
    before = dt.datetime.now(dt.UTC)
    await reconciler.reconcile(key, cause="test")
    assert (reconciler.scheduler.due(key) - before).total_seconds() <= MAX_RETRY_DELAY + 1  # type: ignore[operator]


# ---- orphan collection -----------------------------------------------------------------------
async def test_orphan_claims_are_collected_only_when_their_owner_is_provably_gone(
    kube: FakeKube, reconciler: Reconciler, make_session: Make, make_claim: Make
) -> None:
    session = make_session()
    claim = make_claim(owner_uid=session["metadata"]["uid"])
    kube.claims[("ns", "demo")] = claim
    _store(kube, session)
    assert await reconciler.collect_orphan(claim) is False  # the owner lives
    kube.sessions.clear()
    _store(kube, make_session(uid="another-uid"))  # recreated under the same name: not the owner
    assert await reconciler.collect_orphan(claim) is True
    assert ("delete-claim", "demo") in kube.writes

    kube.writes.clear()
    assert await reconciler.collect_orphan(make_claim(owner_uid=None)) is False  # names no owner
    assert await reconciler.collect_orphan(make_claim(deleting=True)) is False  # already going
    labelled = make_claim(owner_uid=None)
    labelled["metadata"]["labels"] = {"agentsession.dev/session-uid": "gone-uid"}
    kube.claims[("ns", "demo")] = labelled
    assert await reconciler.collect_orphan(labelled) is True  # the uid label, checked by listing
    assert kube.writes == [("delete-claim", "demo")]


# ---- the deadline scheduler -------------------------------------------------------------------
async def test_scheduler_fires_each_key_once_at_its_latest_deadline() -> None:
    fired: list[tuple[Key, float]] = []
    start = dt.datetime.now(dt.UTC)
    done = asyncio.Event()

    async def fire(key: Key, at: dt.datetime) -> None:
        fired.append((key, round((at - start).total_seconds(), 2)))
        if len(fired) == 2:
            done.set()

    scheduler = DeadlineScheduler(fire)
    scheduler.start()
    try:
        a, b, c = ("ns", "a"), ("ns", "b"), ("ns", "c")
        scheduler.schedule(a, start + dt.timedelta(seconds=0.2))
        scheduler.schedule(b, start + dt.timedelta(seconds=0.05))
        scheduler.schedule(a, start + dt.timedelta(seconds=0.1))  # moved earlier: the 0.2 entry is stale
        scheduler.schedule(c, start + dt.timedelta(seconds=0.08))
        scheduler.cancel(c)
        assert len(scheduler) == 2
        await asyncio.wait_for(done.wait(), 2)
        await asyncio.sleep(0.2)  # the stale 0.2 s entry of `a` must not fire
    finally:
        await scheduler.stop()
    assert fired == [(("ns", "b"), 0.05), (("ns", "a"), 0.1)]
    assert len(scheduler) == 0


async def test_scheduler_wakes_for_an_earlier_deadline_and_stops_cleanly() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def fire(key: Key, at: dt.datetime) -> None:
        started.set()
        await release.wait()

    scheduler = DeadlineScheduler(fire)
    scheduler.start()
    now = dt.datetime.now(dt.UTC)
    scheduler.schedule(("ns", "late"), now + dt.timedelta(hours=1))
    await asyncio.sleep(0.01)  # asleep until the hour is up
    scheduler.schedule(("ns", "now"), now)
    await asyncio.wait_for(started.wait(), 1)  # woken at once for the earlier one
    await scheduler.stop()  # cancels the running firing too
    assert scheduler.due(("ns", "late")) is not None


async def test_the_api_session_does_no_env_lookups_per_call() -> None:
    from agentsession_operator.kube.api import ApiClient, Credentials

    api_client = ApiClient(Credentials(server="https://127.0.0.1:1"))
    try:
        assert api_client._open().trust_env is False
    finally:
        await api_client.close()


async def test_prime_waits_out_a_storage_that_is_still_initializing(kube: FakeKube) -> None:
    """Seen on a fresh cluster: listing a just-created CRD answered 429 'storage is (re)initializing';
    the startup handler failed and kopf retried it a minute later, the operator unhealthy meanwhile."""
    from agentsession_operator.kube.api import ApiException

    calls = {"n": 0}
    real = kube.list_policies

    async def flaky(namespace: str | None = None) -> list[dict[str, Any]]:
        calls["n"] += 1
        if calls["n"] < 3:
            raise ApiException(status=429, reason="storage is (re)initializing")
        return await real(namespace)

    kube.list_policies = flaky  # type: ignore[method-assign]
    rec = Reconciler(kube)  # type: ignore[arg-type]
    await rec.prime()
    assert rec.cache.loaded and calls["n"] == 3
    await rec.scheduler.stop()


async def test_the_network_policy_is_created_once_and_a_stale_one_replaced_only_if_owned(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    kube.pools.add(("ns", "python-pool"))
    key = _store(kube, make_session(spec={"warmPoolRef": {"name": "python-pool"}}))
    await reconciler.reconcile(key, cause="test")
    await reconciler.reconcile(key, cause="claim seen")
    assert kube.writes.count(("create-network-policy", "agentsession-demo")) == 1
    policy = kube.network_policies[("ns", "agentsession-demo")]
    assert policy["spec"]["podSelector"]["matchLabels"] == {"agents.x-k8s.io/claim-uid": "claim-demo"}
    # A restarted operator whose watch has not delivered it yet: the create meets it (409), reads it, and
    # replaces a stale spec of its own.
    reconciler.cache.network_policies.clear()
    kube.network_policies[("ns", "agentsession-demo")]["spec"]["ingress"] = [{}]
    await reconciler.reconcile(key, cause="restart")
    assert ("replace-network-policy", "agentsession-demo") in kube.writes
    assert kube.network_policies[("ns", "agentsession-demo")]["spec"]["ingress"] != [{}]
    # Someone else's policy of that name is never overwritten.
    reconciler.cache.network_policies.clear()
    kube.network_policies[("ns", "agentsession-demo")]["metadata"]["ownerReferences"] = []
    kube.network_policies[("ns", "agentsession-demo")]["spec"]["ingress"] = [{}]
    before = copy.deepcopy(kube.sessions[key]["status"])
    await reconciler.reconcile(key, cause="foreign")  # fails: nothing claims isolation meanwhile
    assert kube.sessions[key]["status"] == before
    await reconciler.reconcile(key, cause="retried")
    assert kube.network_policies[("ns", "agentsession-demo")]["spec"]["ingress"] == [{}]
    isolated = next(c for c in kube.sessions[key]["status"]["conditions"] if c["type"] == "NetworkIsolated")
    assert (isolated["status"], isolated["reason"]) == ("False", "NameConflict")


async def test_a_session_event_wakes_only_its_waiting_forks(reconciler: Reconciler, make_session: Make) -> None:
    """wake_forks looks only at the forks (an index), not at every session of the namespace."""
    fork = make_session("copy", spec={"forkFrom": {"name": "demo"}})
    other = make_session("other", spec={"forkFrom": {"name": "elsewhere"}})
    plain = make_session("plain")
    for body in (fork, other, plain):
        reconciler.cache.remember_session(("ns", body["metadata"]["name"]), body)
    assert reconciler.cache.forks == {("ns", "copy"), ("ns", "other")}
    reconciler.wake_forks("ns", "demo")
    assert reconciler.scheduler.due(("ns", "copy")) is not None
    assert reconciler.scheduler.due(("ns", "other")) is None and reconciler.scheduler.due(("ns", "plain")) is None
    reconciler.forget(("ns", "copy"))
    assert reconciler.cache.forks == {("ns", "other")}


async def _listed(reconciler: Reconciler, handler: str, body: dict[str, Any]) -> None:
    """kopf's listing delivers `body` (type None) to one of the watch handlers."""
    import kopf

    from agentsession_operator.handlers import events

    memo = kopf.Memo(state=OperatorState(reconciler=reconciler))
    await getattr(events, handler)(type=None, body=kopf.Body(copy.deepcopy(body)), memo=memo)


async def test_a_fresh_replica_takes_over_a_ready_session_without_a_request(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    """A restart or a failover: kopf lists sessions, claims, Sandboxes and NetworkPolicies side by side, so
    a session's pass often ran before its children arrived: a GET of the claim and of the Sandbox, a
    NetworkPolicy create answered 409 then read and replaced, a GET of the session for each claim listed
    first. Minutes of requests at 10,000 sessions. prime() now lists them all first, in pages."""
    kube.pools.add(("ns", "python-pool"))
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    key = _store(kube, make_session(spec={"warmPoolRef": {"name": "python-pool"}, "ttl": "2h"}, created=now))
    await reconciler.reconcile(key, cause="created")
    claim = kube.claims[("ns", "demo")]
    claim["metadata"]["resourceVersion"] = "7"
    claim["status"] = {
        "sandbox": {"name": "demo", "podIPs": ["10.0.0.9"]},
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": now}
        ],
    }
    sandbox = {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {
            "name": "demo",
            "namespace": "ns",
            "uid": "sandbox-uid",
            "resourceVersion": "8",
            "ownerReferences": [{"kind": "SandboxClaim", "name": "demo", "uid": "claim-demo", "controller": True}],
        },
        "spec": {"podTemplate": {}},
        "status": {"podIPs": ["10.0.0.9"]},
    }
    kube.sandboxes[("ns", "demo")] = sandbox
    kube.network_policies[("ns", "agentsession-demo")]["metadata"]["resourceVersion"] = "9"
    reconciler.cache.remember_claim(("ns", "demo"), claim)
    reconciler.cache.remember_sandbox(("ns", "demo"), sandbox)
    await reconciler.reconcile(key, cause="claim Ready")
    assert kube.sessions[key]["status"]["phase"] == "Ready"

    fresh = Reconciler(kube)  # type: ignore[arg-type]
    await fresh.prime()
    listed = {("list", k) for k in (*PRIMED_KINDS, "policies", "warm_pools", "templates")}
    assert {k for k in kube.reads if k[0] == "list"} == listed
    kube.reads.clear()
    kube.writes.clear()
    # kopf's listings, children first (the order that cost the most before)
    await _listed(fresh, "claim_event", claim)
    await _listed(fresh, "sandbox_event", sandbox)
    await _listed(fresh, "network_policy_event", kube.network_policies[("ns", "agentsession-demo")])
    await _listed(fresh, "session_event", kube.sessions[key])
    assert kube.reads == [] and kube.writes == []
    assert fresh.scheduler.due(key) is not None  # its deadlines are this replica's now
    await asyncio.gather(*fresh._background, return_exceptions=True)
    await fresh.scheduler.stop()


async def test_a_policy_change_or_a_takeover_passes_over_the_cache_without_a_get(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    """What triggers these passes is in the cache already: a deadline's GET first (to act on the newest
    state) made one per session of the namespace, 10,000 at a failover at 10,000 sessions."""
    kube.pools.add(("ns", "python-pool"))
    key = _store(kube, make_session(spec={"warmPoolRef": {"name": "python-pool"}}))
    await reconciler.reconcile(key, cause="created")
    reconciler.scheduler.start()
    kube.reads.clear()
    reconciler.trigger_namespace("ns", cause="policy changed")
    await reconciler.take_over()
    for _ in range(50):
        await asyncio.sleep(0.01)
        if reconciler.scheduler.due(key) is None or reconciler.scheduler.due(key) > dt.datetime.now(dt.UTC):
            break
    await asyncio.sleep(0.05)
    assert ("get-session", "demo") not in kube.reads
    await asyncio.gather(*reconciler._background, return_exceptions=True)


async def test_an_expired_session_without_its_claim_is_passed_without_a_request(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    """A reaped session (Expired, its claim deleted) was read from the API at every pass, to make sure a
    stale event is not recreating a deleted session's claim; an Expired session never creates one."""
    body = make_session(
        status={
            "phase": "Expired",
            "claimName": "demo",
            "conditions": [{"type": "Expired", "status": "True", "reason": "IdleTimeout", "message": ""}],
        }
    )
    key = _store(kube, body)
    reconciler.remember_session(key, copy.deepcopy(body))
    await reconciler.reconcile(key, cause="listed")
    assert kube.reads == []  # neither the session nor its (deleted) claim
    assert not any(w[0] == "create-claim" for w in kube.writes)


async def test_a_pass_resolves_the_settings_in_force_once(
    kube: FakeKube, reconciler: Reconciler, make_session: Make, make_policy: Make, resolves: list[int]
) -> None:
    """The creating pass decides on the cached copy, then once more on the session read live (the claim
    carries env and annotation values the cache does not keep), and a later pass resolves once: the shell
    decides nothing itself (decisions/decide.py). They resolved 5 and 3 times before."""
    count = resolves
    kube.pools.add(("ns", "python-pool"))
    kube.policies.append(make_policy("p", {"limits": {"maxTtl": "4h"}}))
    await reconciler.prime(("ns",))
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # the reconciler reads the real clock
    key = _store(kube, make_session(spec={"warmPoolRef": {"name": "python-pool"}, "ttl": "2h"}, created=now))
    await reconciler.reconcile(key, cause="test")
    assert ("create-claim", "demo") in kube.writes and count == [2]
    await reconciler.reconcile(key, cause="again")
    assert count == [3]


def test_the_uid_fenced_status_patch_tests_the_uid_then_sets_each_member_whole() -> None:
    from agentsession_operator.kube.client import status_json_patch

    ops = status_json_patch({"phase": "Ready", "message/x": "m", "podIPs": None}, "u-1", has_status=True)
    assert ops == [
        {"op": "test", "path": "/metadata/uid", "value": "u-1"},
        {"op": "add", "path": "/status/phase", "value": "Ready"},
        {"op": "add", "path": "/status/message~1x", "value": "m"},
        {"op": "add", "path": "/status/podIPs", "value": None},  # null: pruned, so removed
    ]
    first = status_json_patch({"phase": "Pending", "podIPs": None}, "u-1", has_status=False)
    assert first[1:] == [{"op": "add", "path": "/status", "value": {"phase": "Pending"}}]


async def test_the_claim_carries_the_values_the_cache_does_not_keep(
    kube: FakeKube, reconciler: Reconciler, make_session: Make
) -> None:
    """The cached copy has no env values nor annotation values (issue 49 item 2): the creating pass reads
    the session live and the claim gets them whole."""
    kube.pools.add(("ns", "python-pool"))
    spec = {
        "warmPoolRef": {"name": "python-pool"},
        "env": [{"name": "TOKEN", "value": "s3cret"}],
        "podAnnotations": {"example.com/team": "a"},
    }
    body = make_session(spec=spec)
    key = store(kube, body)
    await _session_event(reconciler, "ADDED", copy.deepcopy(body))
    assert reconciler.cache.sessions[key]["spec"]["env"] == [{"name": "TOKEN"}]
    claim = kube.claims[("ns", "demo")]
    assert claim["spec"]["env"] == [{"name": "TOKEN", "value": "s3cret"}]
    assert claim["spec"]["additionalPodMetadata"]["annotations"] == {"example.com/team": "a"}
