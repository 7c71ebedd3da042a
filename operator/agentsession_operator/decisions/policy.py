"""AgentSessionPolicy selected: which policies apply to a session (:func:`effective_policy_for`), which
per-label caps of theirs it counts against, and a policy's own status (its problems, the sessions it selects).

Forks (:mod:`lineage`): a policy that selects any session a fork's data came from (``status.lineage``:
its source, the source's source, ...) applies to the fork as if it selected it, so the fork is judged by
the union of both sets and the merge rules (:mod:`policy_merge`) only get stricter. Such a policy's
``maxTtl`` counts from that ancestor's creation (:func:`lineage_max_ttl`): a fork, or a chain of them, ends
when the source's data would.

The other steps of the rule set: merging (:mod:`policy_merge`), the settings in force
(:mod:`policy_resolve`) and what a session breaks (:mod:`policy_violations`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from agentsession_api.durations import format_duration
from agentsession_api.timestamps import format_time
from agentsession_api.types import MAX_SESSION_LABELS
from agentsession_api.views import Policy, Session
from agentsession_operator.decisions import conditions, lineage
from agentsession_operator.decisions.policy_merge import (
    EffectivePolicy,
    SessionLimit,
    Sourced,
    merge_policies,
    policy_name,
)
from agentsession_operator.decisions.policy_violations import regex_error
from agentsession_operator.decisions.selectors import selector_matches


def matches(policy: Mapping[str, Any], session_labels: Mapping[str, str] | None) -> bool:
    """True when the policy's ``spec.selector`` selects a session with these metadata labels."""
    return selector_matches(Policy(policy).selector, session_labels)


def selects(
    policy: Mapping[str, Any], session: Mapping[str, Any], ancestors: Sequence[lineage.Ancestor] | None = None
) -> bool:
    """True when the policy, of the session's namespace, selects the session's metadata labels or, for a
    fork, the labels of any session its data came from (``status.lineage``, see :mod:`lineage`)."""
    view = Session(session)
    if Policy(policy).namespace != view.namespace:
        return False
    if matches(policy, view.labels):
        return True
    admitted = admitted_labels(session)
    if admitted is not None and matches(policy, admitted):
        return True
    found = lineage.ancestors(session) if ancestors is None else ancestors
    return any(matches(policy, ancestor.labels) for ancestor in found)


def admitted_labels(session: Mapping[str, Any]) -> Mapping[str, str] | None:
    """``status.admittedLabels``: the labels the operator first judged the session with (issue 49 item 6).
    Policies selecting them keep selecting it: admission refuses a relabel that leaves a policy
    (admission/rules.departures), and this holds the same rule at reconcile when admission did not run."""
    recorded = Session(session).admitted_labels
    if not isinstance(recorded, Mapping):
        return None
    return {str(k): str(v) for k, v in recorded.items()}


def labels_to_admit(session: Mapping[str, Any]) -> dict[str, str] | None:
    """The labels to record as ``status.admittedLabels`` at this pass: the session's own, once (None when
    recorded already, or over MAX_SESSION_LABELS: such a session is refused, see violations)."""
    if admitted_labels(session) is not None:
        return None
    labels = Session(session).labels
    if not isinstance(labels, Mapping) or len(labels) > MAX_SESSION_LABELS:
        return None
    return {str(k): str(v) for k, v in labels.items()}


def applicable_policies(session: Mapping[str, Any], policies: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Policies that :func:`select <selects>` the session, sorted by name."""
    ancestors = lineage.ancestors(session)
    return sorted((p for p in policies if selects(p, session, ancestors)), key=policy_name)


def lineage_max_ttl(session: Mapping[str, Any], policies: Iterable[Mapping[str, Any]]) -> Sourced[timedelta] | None:
    """For a fork: how long it may live, counted from its own creation, so that it ends no later than any
    ancestor's creation plus the maxTtl of the policies selecting that ancestor's labels (the smallest such
    bound). None for a session that is no fork, or when no such policy sets a maxTtl."""
    ancestors = lineage.ancestors(session)
    created = Session(session).creation_time
    if not ancestors or created is None:
        return None
    namespace = Session(session).namespace
    policies = [p for p in policies if Policy(p).namespace == namespace]
    best: Sourced[timedelta] | None = None
    for ancestor in ancestors:
        cap = merge_policies([p for p in policies if matches(p, ancestor.labels)]).max_ttl
        if cap is None or ancestor.created is None:
            continue
        left = ancestor.created + cap.value - created
        if best is None or left < best.value:
            text = f"{cap.text or format_duration(cap.value)} from AgentSession {ancestor.name}'s creation at "
            best = Sourced(left, cap.policy, text + format_time(ancestor.created))
    return best


def effective_policy_for(session: Mapping[str, Any], policies: Iterable[Mapping[str, Any]]) -> EffectivePolicy:
    """:func:`merge_policies` over :func:`applicable_policies`, with a fork's :func:`lineage_max_ttl`."""
    policies = list(policies)
    effective = merge_policies(applicable_policies(session, policies))
    left = lineage_max_ttl(session, policies)
    return effective if left is None else replace(effective, lineage_max_ttl=left)


ANY_VALUE = "*"
"""The group value of a cap counted across values (``*`` is never a label value, so no group collides)."""


def session_limits_for(session: Mapping[str, Any], effective: EffectivePolicy) -> list[tuple[SessionLimit, str]]:
    """The per-label session caps that apply to this session, each with its group value: the session's value
    of that label, or :data:`ANY_VALUE` for a cap counted across values."""
    labels = Session(session).labels
    return [
        (limit, ANY_VALUE if limit.across else labels[limit.key])
        for limit in effective.session_limits
        if limit.key in labels
    ]


def policy_errors(policy: Mapping[str, Any]) -> list[str]:
    """Problems in one policy the schema cannot catch (bad regular expressions, unparsable values)."""
    problems = list(merge_policies([policy]).errors)
    for key, regex in (Policy(policy).spec_view.labels.values or {}).items():
        error = regex_error(regex)
        if error:
            problems.append(f"spec.labels.values[{key}] {regex!r} is not a valid regular expression: {error}")
    return problems


COND_VALID = "Valid"


def policy_status(policy: Mapping[str, Any], sessions: Iterable[Mapping[str, Any]], now: datetime) -> dict[str, Any]:
    """The policy's own status: ``Valid`` (False with every problem, e.g. a pattern RE2 refuses, so GitOps
    tools show it unhealthy), ``matchedSessions`` (sessions of its namespace it selects now) and
    ``observedGeneration``."""
    matched = sum(1 for s in sessions if selects(policy, s))
    problems = policy_errors(policy)
    generation = Policy(policy).generation
    return {
        "observedGeneration": generation,
        "matchedSessions": matched,
        "conditions": conditions.set_condition(
            Policy(policy).status.get("conditions"),
            COND_VALID,
            not problems,
            "InvalidSpec" if problems else "Valid",
            "; ".join(problems) if problems else "the policy parsed and every pattern compiles",
            now,
            generation,
        ),
    }
