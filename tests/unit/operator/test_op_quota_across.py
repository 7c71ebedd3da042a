"""Issue 28 item 6: `maxSessionsPerLabel.countAcrossValues` counts every session carrying the key in one
group, so a tenant choosing team=a1, team=a2, ... does not pass the cap (decisions/quota.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentsession_operator.admission import rules as admission
from agentsession_operator.decisions import quota
from agentsession_operator.decisions.policy import ANY_VALUE, effective_policy_for

Obj = dict[str, Any]
Make = Callable[..., Obj]
PER_VALUE = {"cleanup": {"maxSessionsPerLabel": {"key": "team", "max": 2}}}
ACROSS = {"cleanup": {"maxSessionsPerLabel": {"key": "team", "max": 2, "countAcrossValues": True}}}


def one(name: str, minute: int, team: str | None) -> Obj:
    from tests.unit.operator.conftest import build_session  # type: ignore[import-not-found]

    return build_session(
        name, uid=f"uid-{name}", labels={"team": team} if team else {}, created=f"2025-01-01T10:{minute:02d}:00Z"
    )


def over(session: Obj, sessions: list[Obj], policies: list[Obj], **kw: Any) -> list[str]:
    return quota.over_cap(session, effective_policy_for(session, policies), sessions, **kw)


def test_new_values_pass_a_per_value_cap_but_not_one_across_values(make_policy: Make) -> None:
    """The attack: a1, a2, a3 under max 2. Per value every one is first in its group; across values the
    third is over, naming the two ahead of it."""
    s1, s2, s3 = one("s1", 1, "a1"), one("s2", 2, "a2"), one("s3", 3, "a3")
    everyone = [s1, s2, s3]
    assert over(s3, everyone, [make_policy("cap", PER_VALUE)]) == []
    found = over(s3, everyone, [make_policy("cap", ACROSS)])
    assert found and "carry the label team (any value, countAcrossValues) (s1, s2)" in found[0], found
    assert "the policy maximum is 2 (AgentSessionPolicy cap)" in found[0]
    assert over(s2, everyone, [make_policy("cap", ACROSS)]) == []
    newcomer = one("s4", 9, "zz")
    assert over(newcomer, everyone, [make_policy("cap", ACROSS)], newcomer=True)


def test_a_session_without_the_key_is_not_counted_across_values(make_policy: Make) -> None:
    s1, s2, bare = one("s1", 1, "a1"), one("s2", 2, "a2"), one("bare", 3, None)
    assert over(bare, [s1, s2, bare], [make_policy("cap", ACROSS)], newcomer=True) == []
    assert over(s2, [s1, bare, s2], [make_policy("cap", ACROSS)]) == []


def test_both_kinds_of_cap_on_one_key_hold_together(make_policy: Make) -> None:
    """One policy caps per value at 1, another across values at 2: each holds on its own."""
    policies = [
        make_policy("per", {"cleanup": {"maxSessionsPerLabel": {"key": "team", "max": 1}}}),
        make_policy("all", ACROSS),
    ]
    s1, s2, s3 = one("s1", 1, "a"), one("s2", 2, "a"), one("s3", 3, "b")
    assert any("carry team=a" in s for s in over(s2, [s1, s2, s3], policies))
    assert over(s3, [s1, s3], policies) == []
    assert any("any value" in s for s in over(s3, [s1, s2, s3], policies))


def test_the_admission_groups_and_wakes_of_a_cap_across_values(make_policy: Make) -> None:
    policies = [make_policy("cap", ACROSS)]
    s1, s2, s3 = one("s1", 1, "a1"), one("s2", 2, "a2"), one("s3", 3, "a3")
    assert admission.counted_groups(s3, policies, "CREATE") == [("team", ANY_VALUE)]
    relabelled = one("s2", 2, "a9")
    assert admission.counted_groups(relabelled, policies, "UPDATE", s2) == []  # already in the one group
    bare = one("s2", 2, None)
    assert admission.counted_groups(s2, policies, "UPDATE", bare) == [("team", ANY_VALUE)]
    caps = quota.capped_keys(policies)
    assert caps == {("team", True)}
    # s1 deleted: everyone behind it carrying the key is judged again, whatever the value.
    assert quota.to_wake(s1, None, [s1, s2, s3], caps) == [("ns", "s2"), ("ns", "s3")]
    assert quota.to_wake(s2, relabelled, [s1, s2, s3], caps) == []  # a new value: same group, same place


def test_the_api_type_reads_count_across_values() -> None:
    from agentsession_api.types import SessionLimit

    limit = SessionLimit.model_validate({"key": "team", "max": 3, "countAcrossValues": True})
    assert limit.count_across_values is True
    assert SessionLimit.model_validate({"key": "team", "max": 3}).count_across_values is False
