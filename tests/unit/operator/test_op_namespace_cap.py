"""cleanup.maxSessionsPerNamespace (issue 28 item 2): the pure rule (decisions/quota.py), its sorted places
(kube/places.py), admission (admission/rules.py) and the wake when a place frees."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentsession_operator.admission import rules as admission
from agentsession_operator.decisions import quota
from agentsession_operator.kube.places import Admitted, Places

Obj = dict[str, Any]
WAITING = {
    "phase": "Failed",
    "conditions": [{"type": "Failed", "status": "True", "reason": "PolicyViolation", "message": "over"}],
}


def one(name: str, minute: int, *, labels: dict[str, str] | None = None, status: Obj | None = None) -> Obj:
    from tests.unit.operator.conftest import build_session  # type: ignore[import-not-found]

    return build_session(
        name, uid=f"uid-{name}", labels=labels or {}, created=f"2025-01-01T10:{minute:02d}:00Z", status=status
    )


def cap(make_policy: Callable[..., Obj], value: int, name: str = "cap", **spec: Any) -> Obj:
    return make_policy(name, {"cleanup": {"maxSessionsPerNamespace": value}, **spec})


def places_of(*sessions: Obj) -> list[quota.Rank]:
    return sorted(quota.rank(s) for s in sessions if quota.holds_place(s))


def test_the_first_places_run_whatever_labels_and_selectors(make_policy: Callable[..., Obj]) -> None:
    """Counted over every session of the namespace, also those the policy's selector does not select."""
    policies = [cap(make_policy, 2, selector={"matchLabels": {"team": "a"}})]
    s1, s2, s3 = one("s1", 1, labels={"team": "a"}), one("s2", 2), one("s3", 3, labels={"team": "zz"})
    done = one("s0", 0, status={"phase": "Expired"})
    places = places_of(done, s1, s2, s3)
    assert quota.over_namespace_cap(s1, policies, places) == []
    assert quota.over_namespace_cap(s2, policies, places) == []
    (message,) = quota.over_namespace_cap(s3, policies, places)
    assert message == (
        "2 unfinished AgentSessions already hold a place in namespace ns (s1, s2); the policy maximum is 2 "
        "per namespace (AgentSessionPolicy cap, cleanup.maxSessionsPerNamespace); one of them must be deleted "
        "or finish first"
    )
    assert quota.over_namespace_cap(done, policies, places) == []  # finished: never over


def test_the_smallest_cap_of_the_namespace_wins_and_other_namespaces_do_not_count(
    make_policy: Callable[..., Obj],
) -> None:
    policies = [cap(make_policy, 5, "loose"), cap(make_policy, 1, "strict")]
    other = make_policy("elsewhere", {"cleanup": {"maxSessionsPerNamespace": 1}})
    other["metadata"]["namespace"] = "other"
    assert quota.namespace_limit("ns", policies) == quota.NamespaceLimit("ns", 1, "strict")
    assert quota.namespace_limit("ns", [other], default=0) is None
    assert quota.namespace_limit("ns", [make_policy("none", {})], default=0) is None
    # Without a policy's cap, the operator's default holds (--max-sessions-per-namespace).
    default = quota.NamespaceLimit("ns", quota.DEFAULT_MAX_SESSIONS_PER_NAMESPACE, "")
    assert quota.namespace_limit("ns", [other]) == default


def test_admission_counts_every_other_place_and_names_them(make_policy: Callable[..., Obj]) -> None:
    policies = [cap(make_policy, 2)]
    held = places_of(one("s1", 1), one("s2", 2, status=WAITING))  # a waiting session holds its place
    newcomer = one("new", 9)
    refused = admission.review(newcomer, policies, [], [], "CREATE", places=held)
    assert len(refused) == 1 and "(s1, s2)" in refused[0] and "maximum is 2 per namespace" in refused[0]
    assert admission.review(newcomer, policies, [], [], "CREATE", places=held[:1]) == []
    many = [(f"2025-01-01T10:{i:02d}:00Z", f"s{i}") for i in range(8)]
    (message,) = admission.review(newcomer, [cap(make_policy, 3)], [], [], "CREATE", places=many)
    assert message.startswith("8 unfinished AgentSessions already hold a place") and "and 3 more" in message
    assert admission.review(newcomer, [], [], [], "CREATE", places=many) == []  # no cap, nothing counted


def test_places_follow_sessions_and_report_what_they_free() -> None:
    places = Places()
    s1, s2, s3 = one("s1", 1), one("s2", 2), one("s3", 3)
    for s in (s3, s1, s2):
        assert places.update(("ns", s["metadata"]["name"]), s) is None
    assert [name for _, name in places.in_namespace("ns")] == ["s1", "s2", "s3"]
    assert places.update(("ns", "s2"), {**s2, "status": {"phase": "Expired"}}) == quota.rank(s2)
    assert places.update(("ns", "s1"), None) == quota.rank(s1)
    assert places.update(("ns", "gone"), None) is None
    assert [name for _, name in places.in_namespace("ns")] == ["s3"]
    assert places.in_namespace("other") == ()


def test_a_freed_place_wakes_the_session_at_the_edge_only(make_policy: Callable[..., Obj]) -> None:
    policies = [cap(make_policy, 2)]
    left = places_of(one("s1", 1), one("s3", 3), one("s4", 4), one("s5", 5))  # s2 (minute 2) went
    assert quota.namespace_to_wake(quota.rank(one("s2", 2)), left, policies, "ns") == ["s3"]
    # A place that was over the cap itself frees nothing for the others.
    assert quota.namespace_to_wake(quota.rank(one("s6", 6)), left, policies, "ns") == []
    assert quota.namespace_to_wake(quota.rank(one("s2", 2)), left, [], "ns") == []


def test_admitted_creates_count_until_the_cache_has_them() -> None:
    admitted = Admitted()
    admitted.add(("ns", "a"))
    admitted.add(("other", "b"))
    assert admitted.pending("ns", {}) == ["a"]
    assert admitted.pending("ns", {("ns", "a"): {}}) == []
    assert admitted.pending("other", {}) == ["b"]


def test_a_pass_over_the_cap_waits_without_a_claim(make_policy: Callable[..., Obj]) -> None:
    """The reconciler's backstop: the third session of a namespace capped at 2 gets no claim and waits."""
    from datetime import UTC, datetime

    from agentsession_operator.decisions import decide
    from agentsession_operator.decisions.actions import CreateClaim

    policies = [cap(make_policy, 2)]
    s1, s2, s3 = one("s1", 1), one("s2", 2), one("s3", 3)
    places = places_of(s1, s2, s3)
    now = datetime(2025, 1, 1, 10, 30, tzinfo=UTC)
    seen = decide.Observed(s3, None, None, now, policies=policies, pools={"python-pool"}, places=places)
    decision = decide.decide(seen)
    assert not any(isinstance(a, CreateClaim) for a in decision.actions)
    assert decision.status is not None and decision.status["phase"] == "Failed"
    failed = next(c for c in decision.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "PolicyViolation" and "maximum is 2 per namespace" in failed["message"]
    first = decide.decide(decide.Observed(s1, None, None, now, policies=policies, pools={"python-pool"}, places=places))
    assert any(isinstance(a, CreateClaim) for a in first.actions)


def test_whom_a_change_wakes_is_one_decision_that_scans_only_when_a_place_moved(
    make_policy: Callable[..., Obj],
) -> None:
    """Issue 50 item 1: quota wake-ups are decided (quota.wake_ups), the reconciler only schedules them."""
    reads: list[str] = []

    def places() -> list[quota.Rank]:
        reads.append("places")
        return places_of(one("s1", 1), one("s3", 3), one("s4", 4))

    def sessions() -> list[Obj]:
        reads.append("sessions")
        return [one("s1", 1, labels={"team": "a"}), one("s3", 3, labels={"team": "a"})]

    gone = one("s2", 2, labels={"team": "a"})
    # No policy: the operator's own cap (here 2) still frees the place; no label group, nothing to refresh.
    assert quota.wake_ups("ns", gone, None, [], 2, places, sessions) == quota.WakeUps(freed=("s3",))
    assert reads == ["places"]
    # A relabel that moves no place reads nothing at all.
    reads.clear()
    relabelled = one("s2", 2, labels={"team": "b"})
    assert quota.wake_ups("ns", gone, relabelled, [], 2, places, sessions) == quota.WakeUps()
    assert reads == []
    # A policy capping the label: the sessions ranked after it in the group it left, and matchedSessions.
    capped = make_policy("teams", {"cleanup": {"maxSessionsPerLabel": {"key": "team", "max": 1}}})
    wake = quota.wake_ups("ns", gone, relabelled, [capped], 0, places, sessions)
    assert wake.moved == (("ns", "s3"),) and wake.matched_changed and wake.freed == ()
