"""AgentSessionPolicy at admission: the reconciler's own rules, decided before the object is stored.

Pure (no API calls): the webhook handler (admission/handler.py) gathers the inputs and refuses a
request when :func:`review` returns anything. Every sentence comes from policy_violations.py, the same
code that writes the ``PolicyCompliant`` condition, so admission and reconciliation can never disagree on
a rule; the reconciler stays the backstop for whatever slips past (operator down, a policy not yet seen).

* CREATE: every violation of :func:`policy_violations.violations`, plus ``cleanup.maxSessionsPerLabel`` counted
  over the places other sessions of the namespace hold (:mod:`quota`: unfinished, waiting ones included).
* UPDATE: only violations the change introduces. Immutable fields (warmPoolRef, env,
  volumeClaimTemplates) cannot change, but ttl, idleTimeout, idleAction, labels, podLabels,
  podAnnotations and metadata.labels can; a session that broke a rule already (say a policy lowered
  its maxTtl later) must still take unrelated writes such as activity annotations or suspend, so
  standing violations are reported as warnings (:func:`standing_violations`), never as refusals.
  An UPDATE that puts the session into a capped label group it was not in (a label added or changed)
  is counted as a CREATE would be (:func:`quota.over_cap`), since the reconciler counts it at every pass.
  A spec UPDATE is judged by the same sentences as a CREATE (policy_violations.violations), so another pool, a
  denied env or annotation, a ttl or idleTimeout over a maximum are refused before they are stored; once
  the sandbox exists the maxima recorded in ``status.resolved`` still bound spec.ttl/idleTimeout after
  a policy is loosened (policy_resolve.recorded_maxima), as they do at reconcile.
  A session may only become more constrained: a label change that takes it out of a policy that
  selected it (``kubectl label ags s1 team-``) is refused (:func:`departures`), naming the policy and
  the labels to restore; to move a session elsewhere, delete it and create it anew.
* ``cleanup.maxSessionsPerNamespace``: a CREATE is refused when the namespace already has that many places
  held (:func:`quota.over_namespace_cap`, every session of the namespace, whatever its labels). No UPDATE
  can join that group: every session is in it from its creation.
* Anything else, and objects being deleted: nothing to refuse.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentsession_operator.decisions import policy, policy_violations, quota

REFUSAL_PREFIX = "AgentSession refused by AgentSessionPolicy: "


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def counted_groups(
    session: Mapping[str, Any],
    policies: Iterable[Mapping[str, Any]],
    operation: str,
    old: Mapping[str, Any] | None = None,
) -> list[tuple[str, str]]:
    """The capped (key, value) label groups :func:`review` counts, so the handler lists only those
    sessions: every capped group of the session on CREATE, the groups it joins on UPDATE."""
    applied = policy.session_limits_for(session, policy.effective_policy_for(session, policies))
    limits = [(limit.key, value) for limit, value in applied]
    if operation == "CREATE":
        return limits
    if operation == "UPDATE" and old is not None:
        entered = quota.joined(session, old, [(limit.key, limit.across) for limit, _ in applied])
        return [group for group in limits if group in entered]
    return []


def _deleting(session: Mapping[str, Any]) -> bool:
    return bool(_meta(session).get("deletionTimestamp"))


def review(
    session: Mapping[str, Any],
    policies: Iterable[Mapping[str, Any]],
    label_domains: Sequence[str],
    sessions_in_namespace: Sequence[Mapping[str, Any]],
    operation: str,
    old: Mapping[str, Any] | None = None,
    places: Sequence[quota.Rank] = (),
    namespace_default: int = quota.DEFAULT_MAX_SESSIONS_PER_NAMESPACE,
) -> list[str]:
    """Every reason to refuse this CREATE or UPDATE of ``session`` (empty: admit it).

    ``policies`` may hold policies of any namespace (only the session's namespace and matching
    selectors apply); ``label_domains`` is agent-sandbox's pod label allowlist; ``sessions_in_namespace``
    holds the sessions of the groups :func:`counted_groups` names; ``old`` is the stored object on UPDATE;
    ``places`` the ranks of the places held in the namespace (maxSessionsPerNamespace), sorted;
    ``namespace_default`` the operator's cap of a namespace no policy caps (0: none).
    """
    if operation not in ("CREATE", "UPDATE") or _deleting(session):
        return []
    policies = list(policies)
    effective = policy.effective_policy_for(session, policies)
    found = policy_violations.violations(session, effective, label_domains)
    found += policy_violations.hibernate_refusals(session, effective)
    if operation == "CREATE":
        found += quota.over_cap(session, effective, sessions_in_namespace, newcomer=True)
        return found + quota.over_namespace_cap(session, policies, places, newcomer=True, default=namespace_default)
    if old is None:
        return found
    found = departures(session, old, policies) + found
    before = set(_refusals(old, policies, label_domains))
    found = [sentence for sentence in found if sentence not in before]
    # A label that puts a running session into a full group would stop a session (or this one): refused.
    entered = counted_groups(session, policies, operation, old)
    if entered:
        found += quota.over_cap(session, effective, sessions_in_namespace, newcomer=True, only=entered)
    return found


def _selector_keys(selector: Mapping[str, Any] | None) -> list[str]:
    selector = selector or {}
    keys = list((selector.get("matchLabels") or {}).keys())
    keys += [str(req.get("key", "")) for req in selector.get("matchExpressions") or []]
    return list(dict.fromkeys(keys))


def _by_labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj`` as its labels (and lineage) select it: without status.admittedLabels."""
    status = obj.get("status")
    if not isinstance(status, Mapping) or "admittedLabels" not in status:
        return obj
    return {**obj, "status": {k: v for k, v in status.items() if k != "admittedLabels"}}


def departures(session: Mapping[str, Any], old: Mapping[str, Any], policies: Iterable[Mapping[str, Any]]) -> list[str]:
    """On UPDATE: one sentence per policy that selected the stored object and would not select the new one.

    Leaving a policy can only loosen what applies (its limits, required labels, deny lists stop
    counting), so it is refused; the sentence says which labels to put back.
    """
    policies = list(policies)
    # By labels: status.admittedLabels keeps the policies holding whatever the labels say (the reconcile
    # backstop), and would hide the departure from the writer, who is told here what to put back.
    now = {id(p) for p in policy.applicable_policies(_by_labels(session), policies)}
    old_labels: Mapping[str, str] = _meta(old).get("labels") or {}
    new_labels: Mapping[str, str] = _meta(session).get("labels") or {}
    found = []
    for left in policy.applicable_policies(_by_labels(old), policies):
        if id(left) in now:
            continue
        selector = (left.get("spec") or {}).get("selector")
        changed = [k for k in _selector_keys(selector) if old_labels.get(k) != new_labels.get(k)]
        restore = ", ".join(f"{k}={old_labels[k]}" if k in old_labels else f"no label {k}" for k in changed)
        what = ", ".join(f"{k}" for k in changed) or "metadata.labels"
        found.append(
            f"changing label {what} would take this session out of AgentSessionPolicy "
            f"{_meta(left).get('name', '')}, which selects it (a session may only become more constrained): "
            f"restore {restore or 'the labels'}, or delete the session and create it anew"
        )
    return found


def standing_violations(
    session: Mapping[str, Any],
    policies: Iterable[Mapping[str, Any]],
    label_domains: Sequence[str],
    old: Mapping[str, Any],
) -> list[str]:
    """On UPDATE: violations the stored object had already and the new one keeps (admitted, but warned)."""
    if _deleting(session):
        return []
    policies = list(policies)
    before = set(_refusals(old, policies, label_domains))
    now = _refusals(session, policies, label_domains)
    return [sentence for sentence in now if sentence in before]


def _refusals(session: Mapping[str, Any], policies: list[Mapping[str, Any]], label_domains: Sequence[str]) -> list[str]:
    """What :func:`review` refuses a session for, quotas and departures aside."""
    effective = policy.effective_policy_for(session, policies)
    found = policy_violations.violations(session, effective, label_domains)
    return found + policy_violations.hibernate_refusals(session, effective)


FORK_REFUSAL_PREFIX = "AgentSession fork refused: "


def refusal_message(violations: Sequence[str]) -> str:
    """The message the API server returns to the client (kubectl prints it)."""
    return REFUSAL_PREFIX + "; ".join(violations)


def fork_refusal_message(problems: Sequence[str]) -> str:
    """The message for a fork refused for its source (not for a policy)."""
    return FORK_REFUSAL_PREFIX + "; ".join(problems)
