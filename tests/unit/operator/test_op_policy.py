"""Policy selection, merging (most restrictive wins), resolution and violation messages."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from agentsession_operator.decisions.policy import (
    applicable_policies,
    effective_policy_for,
    matches,
    policy_errors,
    session_limits_for,
)
from agentsession_operator.decisions.policy_merge import EMPTY_POLICY, SessionLimit, merge_policies
from agentsession_operator.decisions.policy_resolve import resolve
from agentsession_operator.decisions.policy_violations import violations

Make = Callable[..., dict[str, Any]]
GI = 2**30


def test_matches_uses_selector(make_policy: Make) -> None:
    assert matches(make_policy("all"), {"team": "a"})
    assert matches(make_policy("all"), None)
    selective = make_policy("p", {"selector": {"matchLabels": {"team": "a"}}})
    assert matches(selective, {"team": "a"}) and not matches(selective, {"team": "b"})
    expr = make_policy("p", {"selector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}})
    assert matches(expr, {"tier": "x"}) and not matches(expr, {})


def test_applicable_policies_filter_namespace_and_sort(make_policy: Make, make_session: Make) -> None:
    policies = [
        make_policy("zeta"),
        make_policy("alpha"),
        make_policy("other-ns", namespace="elsewhere"),
        make_policy("not-me", {"selector": {"matchLabels": {"team": "b"}}}),
    ]
    chosen = applicable_policies(make_session(labels={"team": "a"}), policies)
    assert [p["metadata"]["name"] for p in chosen] == ["alpha", "zeta"]


def test_merge_most_restrictive(make_policy: Make) -> None:
    a = make_policy(
        "a",
        {
            "limits": {
                "maxTtl": "4h",
                "maxIdleTimeout": "10m",
                "maxStorage": "20Gi",
                "allowedWarmPools": ["p1", "p2", "p3"],
                "env": {"allow": ["APP_*", "LANG"], "deny": ["AWS_*"]},
            },
            "labels": {"required": ["team"], "allowedPrefixes": ["x/"], "values": {"team": "^[a-z]+$"}},
            "cleanup": {"deleteFinishedAfter": "48h", "maxSessionsPerLabel": {"key": "team", "max": 20}},
        },
    )
    b = make_policy(
        "b",
        {
            "limits": {
                "maxTtl": "2h",
                "maxIdleTimeout": "30m",
                "maxStorage": "10Gi",
                "allowedWarmPools": ["p2", "p3", "p4"],
                "env": {"allow": ["APP_*"], "deny": ["SECRET_*"]},
            },
            "labels": {"required": ["owner"], "allowedPrefixes": ["x/y"], "values": {"team": "^.{1,3}$"}},
            "cleanup": {"deleteFinishedAfter": "24h", "maxSessionsPerLabel": {"key": "team", "max": 5}},
        },
    )
    merged = merge_policies([b, a])
    assert merged.policies == ("a", "b")
    assert merged.max_ttl is not None and merged.max_ttl.value == timedelta(hours=2) and merged.max_ttl.policy == "b"
    assert merged.max_idle_timeout is not None and merged.max_idle_timeout.value == timedelta(minutes=10)
    assert merged.max_idle_timeout.policy == "a"
    assert merged.max_storage is not None and merged.max_storage.value == 10 * GI
    assert merged.allowed_warm_pools is not None
    assert merged.allowed_warm_pools.value == frozenset({"p2", "p3"})
    assert merged.allowed_warm_pools.policy == "a, b"
    assert [d.value for d in merged.env_deny] == ["AWS_*", "SECRET_*"]
    assert [a.value for a in merged.env_allow] == [("APP_*", "LANG"), ("APP_*",)]
    assert [r.value for r in merged.required_labels] == ["team", "owner"]
    assert [p.value for p in merged.allowed_prefixes] == [("x/",), ("x/y",)]
    assert [v.value for v in merged.label_values] == [("team", "^[a-z]+$"), ("team", "^.{1,3}$")]
    assert merged.delete_finished_after is not None and merged.delete_finished_after.value == timedelta(hours=24)
    assert merged.session_limits == (SessionLimit("team", 5, "b"),)


def test_defaults_from_alphabetically_first(make_policy: Make) -> None:
    late = make_policy(
        "zz",
        {
            "defaults": {
                "warmPoolRef": {"name": "late"},
                "ttl": "9h",
                "idleAction": "Delete",
                "labels": {"a": "z", "b": "z"},
            }
        },
    )
    early = make_policy(
        "aa", {"defaults": {"warmPoolRef": {"name": "early"}, "idleTimeout": "5m", "labels": {"a": "a"}}}
    )
    merged = merge_policies([late, early])
    assert merged.default_warm_pool is not None and merged.default_warm_pool.value == "early"
    assert merged.default_ttl is not None and merged.default_ttl.value == timedelta(hours=9)  # only zz sets it
    assert merged.default_idle_timeout is not None and merged.default_idle_timeout.policy == "aa"
    assert merged.default_idle_action is not None and merged.default_idle_action.value == "Delete"
    assert {k: v.value for k, v in merged.default_labels.items()} == {"a": "a", "b": "z"}


def test_unparsable_values_are_reported_and_ignored(make_policy: Make) -> None:
    merged = merge_policies([make_policy("bad", {"limits": {"maxTtl": "1d", "maxStorage": "lots"}})])
    assert merged.max_ttl is None and merged.max_storage is None
    assert any("maxTtl" in e and "1d" in e for e in merged.errors)
    assert any("maxStorage" in e for e in merged.errors)


def test_policy_errors(make_policy: Make) -> None:
    assert policy_errors(make_policy("ok", {"labels": {"values": {"team": "^[a-z]+$"}}})) == []
    errors = policy_errors(make_policy("p", {"labels": {"values": {"team": "(["}}, "defaults": {"ttl": "x"}}))
    assert any("spec.labels.values[team]" in e for e in errors)
    assert any("spec.defaults.ttl" in e for e in errors)


# --- resolve -----------------------------------------------------------------------------------------
def test_resolve_spec_then_default_then_builtin(make_session: Make, make_policy: Make) -> None:
    effective = merge_policies(
        [
            make_policy(
                "p",
                {
                    "defaults": {
                        "warmPoolRef": {"name": "dflt"},
                        "ttl": "1h",
                        "idleTimeout": "10m",
                        "idleAction": "Suspend",
                        "labels": {"team": "x"},
                        "podLabels": {"sandbox.users.io/a": "1"},
                    }
                },
            )
        ]
    )
    bare = resolve(make_session(spec={}), effective)
    assert bare.warm_pool == "dflt" and bare.ttl == timedelta(hours=1) and bare.idle_timeout == timedelta(minutes=10)
    assert bare.idle_action == "Suspend"
    assert bare.labels == {"team": "x"} and bare.pod_labels == {"sandbox.users.io/a": "1"}
    own = resolve(
        make_session(
            spec={"warmPoolRef": {"name": "mine"}, "ttl": "30m", "idleAction": "Delete", "labels": {"team": "y"}}
        ),
        effective,
    )
    assert own.warm_pool == "mine" and own.ttl == timedelta(minutes=30) and own.idle_action == "Delete"
    assert own.labels == {"team": "y"}
    assert resolve(make_session(spec={})).idle_action == "Delete"
    assert resolve(make_session(spec={}), EMPTY_POLICY).warm_pool is None


def test_resolve_caps_by_maxima(make_session: Make, make_policy: Make) -> None:
    effective = merge_policies([make_policy("p", {"limits": {"maxTtl": "2h", "maxIdleTimeout": "20m"}})])
    over = resolve(make_session(spec={"ttl": "5h", "idleTimeout": "1h"}), effective)
    assert over.ttl == timedelta(hours=2) and over.idle_timeout == timedelta(minutes=20)
    unset = resolve(make_session(spec={}), effective)
    assert unset.ttl == timedelta(hours=2) and unset.idle_timeout == timedelta(minutes=20)
    under = resolve(make_session(spec={"ttl": "1h"}), effective)
    assert under.ttl == timedelta(hours=1)


def test_resolved_pool_is_sticky_once_claimed(make_session: Make, make_policy: Make) -> None:
    status = {
        "resolved": {"warmPoolRef": {"name": "old-default"}},
        "conditions": [
            {
                "type": "ClaimCreated",
                "status": "True",
                "reason": "ClaimExists",
                "message": "",
                "lastTransitionTime": "2025-01-01T11:00:00Z",
            }
        ],
    }
    effective = merge_policies([make_policy("p", {"defaults": {"warmPoolRef": {"name": "new-default"}}})])
    assert resolve(make_session(spec={}, status=status), effective).warm_pool == "old-default"
    not_claimed = {**status, "conditions": []}
    assert resolve(make_session(spec={}, status=not_claimed), effective).warm_pool == "new-default"


# --- violations --------------------------------------------------------------------------------------
def eff(make_policy: Make, spec: dict[str, Any], name: str = "team-limits") -> Any:
    return merge_policies([make_policy(name, spec)])


def test_no_violations_for_a_plain_session(make_session: Make) -> None:
    assert violations(make_session()) == []


def test_ttl_over_max_message(make_session: Make, make_policy: Make) -> None:
    found = violations(make_session(spec={"ttl": "5h"}), eff(make_policy, {"limits": {"maxTtl": "2h"}}))
    assert found == ["spec.ttl 5h exceeds the policy maximum 2h (AgentSessionPolicy team-limits)"]
    found = violations(
        make_session(spec={"idleTimeout": "1h"}), eff(make_policy, {"limits": {"maxIdleTimeout": "30m"}})
    )
    assert found == ["spec.idleTimeout 1h exceeds the policy maximum 30m (AgentSessionPolicy team-limits)"]
    assert violations(make_session(spec={"ttl": "2h"}), eff(make_policy, {"limits": {"maxTtl": "2h"}})) == []


def test_warm_pool_not_allowed(make_session: Make, make_policy: Make) -> None:
    effective = eff(make_policy, {"limits": {"allowedWarmPools": ["a", "b"]}})
    found = violations(make_session(spec={"warmPoolRef": {"name": "python-pool"}}), effective)
    assert found == [
        "spec.warmPoolRef.name python-pool is not an allowed warm pool (allowed: a, b) (AgentSessionPolicy team-limits)"
    ]
    assert violations(make_session(spec={"warmPoolRef": {"name": "a"}}), effective) == []
    both = merge_policies(
        [
            make_policy("x", {"limits": {"allowedWarmPools": ["a"]}}),
            make_policy("y", {"limits": {"allowedWarmPools": ["b"]}}),
        ]
    )
    (message,) = violations(make_session(spec={"warmPoolRef": {"name": "a"}}), both)
    assert "(allowed: none) (AgentSessionPolicies x, y)" in message
    default = merge_policies(
        [make_policy("d", {"defaults": {"warmPoolRef": {"name": "c"}}, "limits": {"allowedWarmPools": ["a"]}})]
    )
    (message,) = violations(make_session(spec={}), default)
    assert message.startswith("the default warm pool c is not an allowed warm pool")


def test_storage_over_max(make_session: Make, make_policy: Make) -> None:
    def vct(name: str, size: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"resources": {"requests": {"storage": size}}}}

    session = make_session(spec={"volumeClaimTemplates": [vct("a", "8Gi"), vct("b", "7Gi")]})
    found = violations(session, eff(make_policy, {"limits": {"maxStorage": "10Gi"}}))
    assert found == [
        "spec.volumeClaimTemplates request 15Gi in total, more than the policy maximum 10Gi "
        "(AgentSessionPolicy team-limits)"
    ]
    assert violations(session, eff(make_policy, {"limits": {"maxStorage": "15Gi"}})) == []


def test_env_deny_and_allow(make_session: Make, make_policy: Make) -> None:
    session = make_session(
        spec={
            "env": [
                {"name": "AWS_SECRET", "value": "x"},
                {"name": "LANG", "value": "C"},
                {"name": "APP_X", "value": ""},
            ]
        }
    )
    effective = eff(make_policy, {"limits": {"env": {"allow": ["APP_*", "AWS_*"], "deny": ["AWS_*"]}}})
    assert violations(session, effective) == [
        "spec.env AWS_SECRET is denied by the pattern AWS_* (AgentSessionPolicy team-limits)",
        "spec.env LANG matches none of the allowed patterns (APP_*, AWS_*) (AgentSessionPolicy team-limits)",
    ]
    case = violations(make_session(spec={"env": [{"name": "aws_x", "value": ""}]}), effective)
    assert case == [
        "spec.env aws_x matches none of the allowed patterns (APP_*, AWS_*) (AgentSessionPolicy team-limits)"
    ]


def test_required_labels(make_session: Make, make_policy: Make) -> None:
    effective = eff(make_policy, {"labels": {"required": ["team", "owner"]}})
    found = violations(make_session(labels={"team": "a"}), effective)
    assert found == ["metadata.labels is missing the required label owner (AgentSessionPolicy team-limits)"]


def test_allowed_prefixes(make_session: Make, make_policy: Make) -> None:
    effective = eff(make_policy, {"labels": {"allowedPrefixes": ["team.example.com/", "sandbox.users.io/"]}})
    session = make_session(
        spec={"labels": {"team.example.com/a": "1", "other": "2"}, "podLabels": {"sandbox.users.io/x": "y"}}
    )
    assert violations(session, effective) == [
        "spec.labels key other does not start with an allowed prefix (team.example.com/, sandbox.users.io/) "
        "(AgentSessionPolicy team-limits)"
    ]


def test_label_value_patterns(make_session: Make, make_policy: Make) -> None:
    effective = eff(make_policy, {"labels": {"values": {"team": "[a-z]+"}}})
    session = make_session(labels={"team": "Team1"}, spec={"labels": {"team": "ok"}})
    assert violations(session, effective) == [
        "metadata.labels team=Team1 does not match the pattern [a-z]+ (AgentSessionPolicy team-limits)"
    ]
    bad_regex = eff(make_policy, {"labels": {"values": {"team": "(["}}})
    (message,) = violations(make_session(labels={"team": "a"}), bad_regex)
    assert "not a valid regular expression" in message and "fix the policy" in message


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("team", 'key "team" has no domain prefix'),
        ("example.com/team", "uses the domain example.com, which agent-sandbox does not allow"),
        ("evilsandbox.users.io/x", "uses the domain evilsandbox.users.io"),
    ],
)
def test_pod_label_domains(make_session: Make, key: str, problem: str) -> None:
    (message,) = violations(make_session(spec={"warmPoolRef": {"name": "p"}, "podLabels": {key: "v"}}))
    assert message.startswith("spec.podLabels") and problem in message
    assert "sandbox.users.io" in message


@pytest.mark.parametrize("key", ["sandbox.users.io/team", "a.sandbox.users.io/team", "SANDBOX.users.io/x"])
def test_pod_label_domains_allowed(make_session: Make, key: str) -> None:
    assert violations(make_session(spec={"podLabels": {key: "v"}})) == []


def test_pod_label_domains_configurable(make_session: Make) -> None:
    session = make_session(spec={"podLabels": {"example.com/team": "v"}})
    assert violations(session, EMPTY_POLICY, ["example.com"]) == []
    (message,) = violations(session, EMPTY_POLICY, ["corp.io"])
    assert "use corp.io (or a subdomain)" in message


def test_default_pod_labels_are_checked_and_attributed(make_session: Make, make_policy: Make) -> None:
    effective = eff(make_policy, {"defaults": {"podLabels": {"team": "x"}}}, name="defaults-policy")
    (message,) = violations(make_session(spec={}), effective)
    assert message.startswith('default podLabels (AgentSessionPolicy defaults-policy) key "team"')


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("kubernetes.io/x", True),
        ("foo.kubernetes.io/x", True),
        ("k8s.io/x", True),
        ("agents.x-k8s.io/x", True),
        ("cluster-autoscaler.kubernetes.io/safe-to-evict", False),
        ("example.com/x", False),
        ("note", False),
        ("notk8s.io/x", False),
    ],
)
def test_pod_annotation_blocklist(make_session: Make, key: str, bad: bool) -> None:
    found = violations(make_session(spec={"podAnnotations": {key: "v"}}))
    assert bool(found) is bad
    if bad:
        assert f'spec.podAnnotations key "{key}"' in found[0]


def test_everything_reported_at_once(make_session: Make, make_policy: Make) -> None:
    effective = eff(
        make_policy,
        {"limits": {"maxTtl": "1h", "env": {"deny": ["X"]}}, "labels": {"required": ["team"]}},
    )
    session = make_session(spec={"ttl": "2h", "env": [{"name": "X", "value": ""}], "podLabels": {"nope": "1"}})
    assert len(violations(session, effective)) == 4


def test_session_limits(make_session: Make, make_policy: Make) -> None:
    effective = effective_policy_for(
        make_session(labels={"team": "a"}),
        [make_policy("cap", {"cleanup": {"maxSessionsPerLabel": {"key": "team", "max": 2}}})],
    )
    ((limit, value),) = session_limits_for(make_session(labels={"team": "a"}), effective)
    assert limit == SessionLimit("team", 2, "cap") and value == "a"
    assert session_limits_for(make_session(labels={}), effective) == []


def test_the_restore_annotation_is_a_violation_whatever_the_policy(make_session: Make) -> None:
    """Issue 33: the webhook refuses it and the reconcile stops such a session (one stored before the CRD's
    CEL rule, or while neither ran), with the same sentence as the API server's."""
    from agentsession_api import cel_rules, names

    found = violations(make_session(spec={"podAnnotations": {names.ANNOTATION_RESTORE_FROM: "victim-0123456789"}}))
    assert found == [f"spec.podAnnotations key {names.ANNOTATION_RESTORE_FROM} {cel_rules.RESTORE_ANNOTATION_TEXT}"]
