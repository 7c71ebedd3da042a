"""maxSessionsPerLabel as a real quota (issue 11, item 5): the pure rule (decisions/quota.py), what the
reconciler does with it at every pass, what it wakes, and policies' matchedSessions following sessions."""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentsession_api import names
from agentsession_operator.admission import rules as admission
from agentsession_operator.decisions import naming, quota
from agentsession_operator.decisions.policy import effective_policy_for
from agentsession_operator.kube import policy_status
from agentsession_operator.kube.client import Kube
from agentsession_operator.kube.reconciler import Reconciler

Obj = dict[str, Any]
Make = Callable[..., Obj]
CAP = {"cleanup": {"maxSessionsPerLabel": {"key": "team", "max": 2}}}
WAITING = {
    "phase": "Failed",
    "conditions": [{"type": "Failed", "status": "True", "reason": "PolicyViolation", "message": "over"}],
}


def one(name: str, minute: int, *, team: str | None = "a", status: Obj | None = None, deleting: bool = False) -> Obj:
    from tests.unit.operator.conftest import build_session  # type: ignore[import-not-found]

    return build_session(
        name,
        uid=f"uid-{name}",
        labels={"team": team} if team else {},
        created=f"2025-01-01T10:{minute:02d}:00Z",
        status=status,
        deleting=deleting,
    )


@pytest.fixture
def cap(make_policy: Make) -> list[Obj]:
    return [make_policy("cap", CAP)]


def over(session: Obj, sessions: list[Obj], policies: list[Obj], **kw: Any) -> list[str]:
    return quota.over_cap(session, effective_policy_for(session, policies), sessions, **kw)


def test_the_first_places_by_creation_run_and_the_rest_wait(cap: list[Obj]) -> None:
    """Waiting (Failed/PolicyViolation) and stopped sessions keep their place; finished ones do not."""
    s1 = one("s1", 1, status={"phase": "Ready", "claimName": "c1"})
    s2 = one("s2", 2, status=WAITING)  # waiting for a slot: still ranked
    s3 = one("s3", 3)
    s4 = one("s4", 4, status={"phase": "Expired"})
    s5 = one("s5", 5, status={"phase": "Suspended"})
    everyone = [s1, s2, s3, s4, s5]
    assert over(s1, everyone, cap) == [] and over(s2, everyone, cap) == []
    (message,) = over(s3, everyone, cap)
    assert message.startswith("2 unfinished AgentSessions already carry team=a (s1, s2); the policy maximum is 2")
    assert over(s4, everyone, cap) == []  # finished: never over
    assert "(s1, s2, s3)" in over(s5, everyone, cap)[0]


def test_finished_for_good_or_deleted_sessions_free_their_place(cap: list[Obj]) -> None:
    terminal = {
        "phase": "Failed",
        "conditions": [{"type": "Failed", "status": "True", "reason": "InvalidMetadata", "message": "x"}],
    }
    claim_gone = {
        "phase": "Terminating",
        "conditions": [{"type": "ClaimCreated", "status": "False", "reason": "ClaimGone"}],
    }
    gone = [
        one("e", 1, status={"phase": "Expired"}),
        one("f", 2, status=terminal),
        one("d", 3, deleting=True, status=claim_gone),
    ]
    me = one("me", 9)
    assert over(me, [*gone, one("x", 4), me], cap) == []
    assert over(me, [*gone, one("x", 4), one("y", 5), me], cap) != []
    assert not quota.holds_place(gone[1]) and quota.holds_place(one("w", 1, status=WAITING))


def test_a_deleting_session_keeps_its_place_while_its_claim_exists(cap: list[Obj], make_claim: Make) -> None:
    """Issue 28 item 5: a tenant adds its own finalizer and deletes its session. The object lingers; so
    does its claim until the operator's delete completes. Until the status says the claim is gone, the
    place stays held: a deletion never lets a second sandbox run beside the first."""
    from agentsession_operator.decisions.policy_resolve import resolve
    from agentsession_operator.decisions.status import compute_status

    now = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
    ready = {
        "phase": "Ready",
        "claimName": "c1",
        "conditions": [{"type": "ClaimCreated", "status": "True", "reason": "ClaimExists"}],
    }
    seen = one("d", 1, deleting=True, status=ready)  # deleted, before any pass of the operator
    assert quota.holds_place(seen)
    assert quota.holds_place(one("n", 1, deleting=True))  # no status yet: maybe a claim, so held
    me = one("me", 9)
    assert over(me, [seen, one("x", 2), me], cap) != []
    claim = make_claim("c1", owner_uid="uid-d")
    terminating = {**seen, "status": compute_status(seen, claim, None, now, resolved=resolve(seen))}
    assert terminating["status"]["phase"] == "Terminating" and quota.holds_place(terminating)
    assert over(me, [terminating, one("x", 2), me], cap) != []
    claim_gone = {**terminating, "status": compute_status(terminating, None, None, now, resolved=resolve(terminating))}
    assert not quota.holds_place(claim_gone)
    assert over(me, [claim_gone, one("x", 2), me], cap) == []
    # One finished for good before its deletion (a terminal claim reason) does not come back to count.
    terminal = {
        "phase": "Failed",
        "claimName": "c1",
        "conditions": [
            {"type": "Failed", "status": "True", "reason": "PodFailed", "message": "x"},
            {"type": "ClaimCreated", "status": "True", "reason": "ClaimExists"},
        ],
    }
    failed = one("f", 1, deleting=True, status=terminal)
    assert not quota.holds_place(failed)
    judged = compute_status(failed, claim, None, now, resolved=resolve(failed))
    assert not quota.holds_place({**failed, "status": judged})


def test_the_ranking_is_the_same_whatever_the_cache_order_or_statuses(cap: list[Obj]) -> None:
    """Deterministic across replicas and restarts: creation time then name, never list order."""
    same_second = [one(name, 7) for name in ("d", "b", "c", "a")]
    for _ in range(5):
        random.shuffle(same_second)
        verdicts = {s["metadata"]["name"]: bool(over(s, same_second, cap)) for s in same_second}
        assert verdicts == {"a": False, "b": False, "c": True, "d": True}


def test_a_label_added_to_a_running_session_counts(cap: list[Obj]) -> None:
    """The group's newest is over when an older session joins it, claim or not (running, it is stopped)."""
    running = {"phase": "Ready", "claimName": "c"}
    old = one("old", 1, team=None, status=running)
    a, b = one("a", 2, status=running), one("b", 3, status=running)
    assert over(b, [old, a, b], cap) == []
    joined = copy.deepcopy(old)
    joined["metadata"]["labels"] = {"team": "a"}
    assert over(b, [joined, a, b], cap) != [] and over(a, [joined, a, b], cap) == []
    # Those behind the join are woken to be judged; nobody is woken for a new (last) session.
    assert quota.to_wake(old, joined, [joined, a, b], {("team", False)}) == [("ns", "a"), ("ns", "b")]
    newest = one("c", 9)
    assert quota.to_wake(None, newest, [joined, a, b, newest], {("team", False)}) == []


def test_a_freed_place_wakes_only_those_behind_it_in_its_group() -> None:
    first, second, third = one("s1", 1), one("s2", 2, status=WAITING), one("s3", 3, status=WAITING)
    other = one("t", 4, team="b", status=WAITING)
    sessions = [first, second, third, other]
    assert quota.to_wake(first, None, sessions, {("team", False)}) == [("ns", "s2"), ("ns", "s3")]
    expired = {**first, "status": {"phase": "Expired"}}
    assert quota.to_wake(first, expired, sessions, {("team", False)}) == [("ns", "s2"), ("ns", "s3")]
    assert quota.to_wake(third, None, sessions, {("team", False)}) == []  # the last: nobody behind it
    unchanged = {**first, "status": {"phase": "Ready"}}
    assert quota.to_wake(first, unchanged, sessions, {("team", False)}) == []  # a status write: no scan, no wake


def test_admission_counts_waiting_sessions_and_refuses_joining_a_full_group(cap: list[Obj]) -> None:
    """CREATE counts every place held (a waiting session too); an UPDATE adding the label is a join."""
    held = [one("s1", 1, status={"phase": "Ready"}), one("s2", 2, status=WAITING)]
    new = one("s3", 0)
    new["metadata"].pop("creationTimestamp")
    (refusal,) = admission.review(new, cap, [], held, "CREATE")
    assert "2 unfinished AgentSessions already carry team=a (s1, s2)" in refusal
    stored = one("old", 0, team="b")
    relabelled = copy.deepcopy(stored)
    relabelled["metadata"]["labels"]["team"] = "a"
    assert admission.counted_groups(relabelled, cap, "UPDATE", stored) == [("team", "a")]
    (refusal,) = admission.review(relabelled, cap, [], [*held, relabelled], "UPDATE", old=stored)
    assert "already carry team=a (s1, s2)" in refusal
    assert admission.review(relabelled, cap, [], held[:1], "UPDATE", old=stored) == []
    # An UPDATE within its group (spec, another label) counts nothing.
    assert admission.counted_groups(relabelled, cap, "UPDATE", relabelled) == []


# ---- the reconciler -------------------------------------------------------------------------------
class FakeKube:
    """What a pass over a running session calls; records Sandbox patches and status writes."""

    def __init__(self, sessions: dict[str, Obj]) -> None:
        self.sessions = sessions
        self.sandbox_patches: list[tuple[str, Obj]] = []
        self.policy_status: list[tuple[str, Obj]] = []

    async def get_session(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.sessions.get(name))

    async def patch_session_status(
        self, namespace: str, name: str, status: Obj, uid: str | None = None, has_status: bool = True
    ) -> Obj | None:
        body = self.sessions[name]
        merged = {k: v for k, v in {**(body.get("status") or {}), **status}.items() if v is not None}
        self.sessions[name] = {**body, "status": merged}
        return copy.deepcopy(self.sessions[name])

    async def get_claim(self, namespace: str, name: str) -> Obj | None:
        return None

    async def get_sandbox(self, namespace: str, name: str) -> Obj | None:
        return None

    async def allowed_label_domains(self, namespace: str, name: str) -> list[str]:
        return ["sandbox.users.io"]

    async def patch_sandbox(self, namespace: str, name: str, patch: Obj) -> None:
        self.sandbox_patches.append((name, patch))

    async def patch_claim(self, namespace: str, name: str, patch: Obj) -> None:
        return None

    async def create_network_policy(self, manifest: Obj) -> Obj:
        return {**manifest, "metadata": {**manifest["metadata"], "uid": "np"}}

    async def patch_policy_status(self, namespace: str, name: str, status: Obj) -> None:
        self.policy_status.append((name, status))

    async def event(self, obj: Obj, reason: str, message: str, type_: str = "Normal") -> None:
        return None


def _running(name: str, minute: int, labels: dict[str, str], make_claim: Make, make_sandbox: Make) -> tuple[Obj, ...]:
    now = datetime.now(UTC)
    session = one(name, 0)
    session["metadata"]["labels"] = labels
    session["metadata"]["creationTimestamp"] = (now - timedelta(minutes=60 - minute)).strftime("%Y-%m-%dT%H:%M:%SZ")
    claim_name = naming.claim_name(name, session["metadata"]["uid"])
    claim = make_claim(claim_name, owner_uid=session["metadata"]["uid"], uid=f"claim-{name}", sandbox_name=claim_name)
    claim["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "Ready", "message": ""}]
    sandbox = make_sandbox(claim_name, owner_uid=f"claim-{name}", mode="Running")
    session["status"] = {"phase": "Ready", "claimName": claim_name, "sandboxName": claim_name}
    return session, claim, sandbox


async def test_a_running_session_pushed_over_the_cap_by_an_older_one_is_stopped_then_resumed(
    make_claim: Make, make_sandbox: Make, make_policy: Make
) -> None:
    """Attack (on the tenant's own quota): `kubectl label ags old team=a` on a running session (while
    admission was off). Before: the cap was judged only for sessions without a claim, so three ran under
    a cap of two. Now the newest of the group is stopped (suspended, claim kept), and resumed when the
    older one is deleted."""
    bodies: dict[str, Obj] = {}
    fake = FakeKube(bodies)
    rec = Reconciler(fake)  # type: ignore[arg-type]
    rec.cache.loaded = True
    rec.cache.policies["ns"]["cap"] = make_policy("cap", CAP)
    for name, minute, labels in (("old", 1, {"team": "a"}), ("a", 2, {"team": "a"}), ("b", 3, {"team": "a"})):
        session, claim, sandbox = _running(name, minute, labels, make_claim, make_sandbox)
        bodies[name] = session
        rec.cache.sessions[("ns", name)] = session
        rec.cache.claims[("ns", claim["metadata"]["name"])] = claim
        rec.cache.sandboxes[("ns", sandbox["metadata"]["name"])] = sandbox
    await rec.reconcile(("ns", "b"), cause="test")
    assert fake.sessions["b"]["status"]["phase"] == "Failed", fake.sessions["b"]["status"]
    compliant = next(c for c in fake.sessions["b"]["status"]["conditions"] if c["type"] == "PolicyCompliant")
    assert "already carry team=a (old, a)" in compliant["message"]
    assert [p["spec"]["operatingMode"] for _, p in fake.sandbox_patches] == ["Suspended"]
    for name in ("old", "a"):
        await rec.reconcile(("ns", name), cause="test")
        assert fake.sessions[name]["status"]["phase"] == "Ready"
    # The oldest goes: b is woken at once and resumed.
    sandbox_key = ("ns", fake.sessions["b"]["status"]["sandboxName"])
    suspended = rec.cache.sandboxes[sandbox_key]
    suspended["spec"]["operatingMode"] = "Suspended"
    suspended["status"]["conditions"] = [{"type": "Suspended", "status": "True", "reason": "PodDeleted"}]
    rec.forget(("ns", "old"))
    assert rec.scheduler.due(("ns", "b")) is not None and rec.scheduler.due(("ns", "a")) is not None
    await rec.reconcile(("ns", "b"), cause="test")
    assert fake.sandbox_patches[-1][1]["spec"]["operatingMode"] == "Running"
    assert fake.sessions["b"]["status"]["phase"] != "Failed"
    await asyncio.gather(*rec._background, return_exceptions=True)


async def test_matched_sessions_follow_session_label_changes(
    make_policy: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """matchedSessions was written on policy events only. Now a session's label change (or a session
    appearing or going) refreshes its namespace's policies once per burst."""
    monkeypatch.setattr(policy_status, "DEBOUNCE", 0.05)
    fake = FakeKube({})
    rec = Reconciler(fake)  # type: ignore[arg-type]
    rec.cache.policies["ns"]["team-a"] = make_policy("team-a", {"selector": {"matchLabels": {"team": "a"}}})
    for i in range(20):  # a burst: one refresh
        rec.remember_session(("ns", f"s{i}"), one(f"s{i}", i))
    await asyncio.sleep(0.2)
    assert [(n, s["matchedSessions"]) for n, s in fake.policy_status] == [("team-a", 20)]
    rec.cache.policies["ns"]["team-a"]["status"] = fake.policy_status[-1][1]
    relabelled = one("s0", 0, team="b")
    relabelled["metadata"]["resourceVersion"] = "5"
    rec.remember_session(("ns", "s0"), relabelled)
    rec.forget(("ns", "s1"))
    await asyncio.sleep(0.2)
    assert fake.policy_status[-1][1]["matchedSessions"] == 18
    status_only = {**relabelled, "status": {"phase": "Ready"}}
    status_only["metadata"] = {**relabelled["metadata"], "resourceVersion": "6"}
    before = len(fake.policy_status)
    rec.remember_session(("ns", "s0"), status_only)  # labels unchanged: nothing to refresh
    await asyncio.sleep(0.2)
    assert len(fake.policy_status) == before


def test_no_policies_no_work() -> None:
    rec = Reconciler(Kube.__new__(Kube))
    rec.remember_session(("ns", "s"), one("s", 1))
    assert rec.policy_status.due == set() and len(rec.scheduler) == 0


def test_session_kind_is_ours() -> None:
    assert names.SESSION_KIND == "AgentSession"


async def test_after_a_restart_a_waiting_session_is_judged_with_every_older_one_known(
    make_policy: Make, make_claim: Make, make_sandbox: Make
) -> None:
    """Restart: kopf's first listing comes in name order, each session's pass as its event is handled. A
    waiting session whose pass ran before the older ones were cached saw nobody ahead and got a claim.
    Now prime() lists every session before any pass."""
    running, _, _ = _running("zeta", 1, {"team": "a"}, make_claim, make_sandbox)  # the oldest, named last
    waiting = one("alpha", 59, status=WAITING)
    waiting["metadata"]["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    fake = FakeKube({"zeta": running, "alpha": waiting})
    created: list[Obj] = []

    async def list_policies(namespace: str | None) -> list[Obj]:
        return [make_policy("cap", {"cleanup": {"maxSessionsPerLabel": {"key": "team", "max": 1}}})]

    async def list_warm_pools(namespace: str | None = None) -> list[Obj]:
        return [{"metadata": {"name": "python-pool", "namespace": "ns"}}]

    async def list_templates(namespace: str | None = None) -> list[Obj]:
        return []

    async def list_page(
        kind: str, token: str | None = None, *, namespace: str | None = None
    ) -> tuple[list[Obj], str, str | None]:
        listed = {"sessions": [copy.deepcopy(waiting), copy.deepcopy(running)]}
        return listed.get(kind, []), "1", None

    async def create_claim(manifest: Obj) -> Obj:
        created.append(manifest)
        return manifest

    for name, fn in (
        ("list_policies", list_policies),
        ("list_warm_pools", list_warm_pools),
        ("list_templates", list_templates),
        ("list_page", list_page),
        ("create_claim", create_claim),
    ):
        setattr(fake, name, fn)
    rec = Reconciler(fake)  # type: ignore[arg-type]
    await rec.prime()
    rec.remember_session(("ns", "alpha"), copy.deepcopy(waiting))  # its watch event, first by name
    await rec.reconcile(("ns", "alpha"), cause="session listed")
    assert created == [] and fake.sessions["alpha"]["status"]["phase"] == "Failed"
    await asyncio.gather(*rec._background, return_exceptions=True)


def test_the_namespace_scan_is_read_only_under_a_cap(cap: list[Obj]) -> None:
    """Every pass asks over_cap; the scan of the cached sessions it may need is read only when the session
    carries a capped label (a pass without one must not cost O(sessions) at 10,000 sessions)."""

    def scan() -> Any:
        raise AssertionError("the sessions were scanned")
        yield

    assert quota.over_cap(one("free", 1, team=None), effective_policy_for(one("free", 1, team=None), cap), scan()) == []
    assert quota.over_cap(one("a", 1), effective_policy_for(one("a", 1), []), scan()) == []
    with pytest.raises(AssertionError, match="scanned"):
        over(one("a", 1), scan(), cap)  # type: ignore[arg-type]


def test_a_namespace_without_any_policy_is_capped_by_the_operators_default(make_session: Any) -> None:
    """Attack (issue 49 item 2): a tenant in a namespace no AgentSessionPolicy caps creates sessions without
    end (each costs the operator and the API server, and waiting ones cost no pod quota). Before: every
    create admitted, the cap being opt-in. Now every namespace has the operator's default cap (1,000:
    --max-sessions-per-namespace, the chart's maxSessionsPerNamespace; a policy's
    cleanup.maxSessionsPerNamespace sets the namespace's own): the 1,001st is refused, saying so."""
    from agentsession_operator.admission import rules as admission_rules

    places = sorted((f"2025-01-01T00:{i // 60:02d}:{i % 60:02d}Z", f"s-{i:04d}") for i in range(1000))
    newcomer = make_session("s-new")
    refused = admission_rules.review(newcomer, [], ["sandbox.users.io"], [], "CREATE", places=places)
    assert any("the operator's default is 1000 per namespace" in r for r in refused), refused
    assert admission_rules.review(newcomer, [], ["sandbox.users.io"], [], "CREATE", places=places[:999]) == []
