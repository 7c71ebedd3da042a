"""``cleanup.maxSessionsPerLabel`` as a quota, judged the same way at admission and at every pass.

The rule (one home; admission and the reconciler both call it):

* A **group** is the sessions of one namespace carrying ``key=value`` for a capped ``key``; with
  ``countAcrossValues`` one group per namespace of every session carrying ``key``, whatever the value
  (a tenant choosing ``team=a1``, ``team=a2``, ... passes a per-value cap, issue 28 item 6).
* A session **holds a place** in its groups from its creation until it is finished for good: Expired,
  Failed for a reason it cannot recover from (agent-sandbox's terminal claim reasons, the same
  "finished" as ``cleanup.deleteFinishedAfter``), or deleted *and its claim gone*. A deleted session
  keeps its place while its status does not say ClaimCreated False (a tenant's own finalizer can keep
  the object for good; the operator deletes its claim at once, and the pass that sees the claim gone
  frees the place). A session waiting for a slot, one
  stopped by a policy, a suspended one: all hold their place (so fixing or resuming one never stops
  another).
* Places are ranked by ``metadata.creationTimestamp``, then name: immutable, so every replica and every
  restart ranks the same way, whatever the cache's order or the statuses written so far.
* The first ``max`` of a group run; every later one is **over**: without a claim it waits (phase
  Failed, reason PolicyViolation, no claim created); with a claim (a label added to a running session,
  sessions stored while admission was off) it is stopped like any policy violation (Sandbox suspended,
  claim and volumes kept). When a place ahead frees (deleted, finished, label changed), the next in
  rank proceeds (a stopped one is resumed).
* Admission: a CREATE, or an UPDATE that puts a session into a group it was not in, is refused when
  the group already has ``max`` places held (the newcomer would rank last, so would only wait).

``cleanup.maxSessionsPerNamespace`` is the same rule with one group per namespace that needs no label:
every session of the namespace holds its place there, whatever the policies' selectors (a tenant
chooses its labels, so a cap a label could dodge is no cap), and the smallest value among the
namespace's policies applies. Its places are handed in as a sorted sequence of ranks (the shell keeps
it, kube/places.py), so a pass counts the places ahead of it by bisection instead of scanning the
namespace: a namespace of 10,000 sessions judged at every pass would be a scan of 10,000 per pass.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentsession_api import phases
from agentsession_api.phases import Phase
from agentsession_api.views import Obj, Policy, Session
from agentsession_operator.decisions import policy
from agentsession_operator.decisions.policy_merge import EffectivePolicy, SessionLimit
from agentsession_operator.decisions.status import TERMINAL_CLAIM_REASONS

NAMES_SHOWN = 5  # sessions named in a sentence; more are counted


def holds_place(body: Mapping[str, Any]) -> bool:
    """True until the session is finished for good (see the module docstring)."""
    session = Session(body)
    # A Terminating session keeps the Expired and Failed conditions it had (decisions.status): one that
    # was finished before its deletion does not come back to count.
    if session.phase == Phase.EXPIRED or session.condition(phases.COND_EXPIRED).status == "True":
        return False
    failed = session.condition(phases.COND_FAILED)
    if (session.phase == Phase.FAILED or failed.status == "True") and failed.reason in TERMINAL_CLAIM_REASONS:
        return False
    if session.deleting:
        # Until a pass saw the claim gone: the deletionTimestamp alone freed the place while a foreign
        # finalizer kept the object and its sandbox ran on (issue 28 item 5).
        return session.condition(phases.COND_CLAIM_CREATED).status != "False"
    return True


def rank(session: Mapping[str, Any]) -> tuple[str, str]:
    """Creation time, then name (RFC 3339 UTC timestamps sort as text)."""
    view = Session(session)
    return view.created, view.name


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    va, vb = Obj(a), Obj(b)
    if va.uid and vb.uid:
        return va.uid == vb.uid
    return bool(va.name) and va.name == vb.name and va.namespace == vb.namespace


def in_group(labels: Mapping[str, Any], key: str, value: str) -> bool:
    """Whether labels put a session in the group ``key=value`` (:data:`policy.ANY_VALUE`: carrying ``key``)."""
    return key in labels if value == policy.ANY_VALUE else labels.get(key) == value


def members(
    namespace: str | None, key: str, value: str, sessions: Iterable[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The sessions holding a place in the group ``key=value`` of ``namespace``, in rank order."""
    found = [
        s
        for s in sessions
        if (Obj(s).namespace or namespace) == namespace and in_group(Obj(s).labels, key, value) and holds_place(s)
    ]
    return sorted(found, key=rank)


def sentence(ahead: Sequence[Mapping[str, Any]], limit: SessionLimit, value: str) -> str:
    """Why a session is over the cap, naming the sessions holding the places (same namespace)."""
    names = [Obj(s).name for s in ahead[:NAMES_SHOWN]]
    more = f" and {len(ahead) - NAMES_SHOWN} more" if len(ahead) > NAMES_SHOWN else ""
    carry = (
        f"the label {limit.key} (any value, countAcrossValues)" if value == policy.ANY_VALUE else f"{limit.key}={value}"
    )
    return (
        f"{len(ahead)} unfinished AgentSessions already carry {carry} ({', '.join(names)}{more}); "
        f"the policy maximum is {limit.max} (AgentSessionPolicy {limit.policy}); one of them must be deleted "
        "or finish first"
    )


def over_cap(
    session: Mapping[str, Any],
    effective: EffectivePolicy,
    sessions: Iterable[Mapping[str, Any]],
    *,
    newcomer: bool = False,
    only: Iterable[tuple[str, str]] | None = None,
) -> list[str]:
    """One sentence per capped label group in which ``session`` is over the cap.

    At a pass (``newcomer`` False) the places ranked before the session count. At admission
    (``newcomer`` True) every place held by another session counts: the newcomer would rank last
    (a stored session's creation time is never later than a new one's). ``only`` limits the check
    to these (key, value) groups (an UPDATE judges only the groups it joins). A session that holds
    no place itself (finished, deleted) is never over.
    """
    limits = policy.session_limits_for(session, effective)
    if not limits or not holds_place(session):
        return []  # before reading ``sessions``: callers may pass a lazy scan of the namespace
    sessions = list(sessions)
    wanted = set(only) if only is not None else None
    namespace = Session(session).namespace
    found = []
    for limit, value in limits:
        if wanted is not None and (limit.key, value) not in wanted:
            continue
        group = [s for s in members(namespace, limit.key, value, sessions) if not _same(s, session)]
        ahead = group if newcomer else [s for s in group if rank(s) < rank(session)]
        if len(ahead) >= limit.max:
            found.append(sentence(ahead, limit, value))
    return found


Cap = tuple[str, bool]
"""A capped label key and whether it is counted across values (``countAcrossValues``)."""


def capped_keys(policies: Iterable[Mapping[str, Any]]) -> frozenset[Cap]:
    """Every label key some policy caps (``cleanup.maxSessionsPerLabel.key``), with how it is counted."""
    keys = set()
    for body in policies:
        limit = Policy(body).cleanup.get("maxSessionsPerLabel") or {}
        if limit.get("key"):
            keys.add((str(limit["key"]), limit.get("countAcrossValues") is True))
    return frozenset(keys)


def groups(session: Mapping[str, Any] | None, caps: Iterable[Cap]) -> frozenset[tuple[str, str]]:
    """The (key, value) groups of ``caps`` in which the session holds a place (value
    :data:`policy.ANY_VALUE` for a cap counted across values)."""
    if session is None or not holds_place(session):
        return frozenset()
    labels = Session(session).labels
    return frozenset((k, policy.ANY_VALUE if across else labels[k]) for k, across in caps if k in labels)


def joined(
    session: Mapping[str, Any], old: Mapping[str, Any] | None, caps: Iterable[Cap]
) -> frozenset[tuple[str, str]]:
    """On UPDATE: the capped groups the new object is in and the stored one was not."""
    caps = list(caps)
    return groups(session, caps) - groups(old, caps)


def to_wake(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    sessions: Iterable[Mapping[str, Any]],
    caps: Iterable[Cap],
) -> list[tuple[str, str]]:
    """Sessions to judge again when one session's place changed (created, relabelled, finished, deleted).

    Only the groups it entered or left, and in them only the sessions ranked after it: a place can
    only push out, or make room for, those behind it. A new session ranks last, so a burst of
    creations wakes nobody.
    """
    caps = list(caps)
    changed = groups(before, caps) ^ groups(after, caps)
    if not changed:
        return []
    me = after if after is not None else before
    assert me is not None
    namespace = Session(me).namespace
    wake = []
    for s in sessions:
        other = Session(s)
        if other.namespace != namespace or _same(s, me) or rank(s) <= rank(me):
            continue
        if any(in_group(other.labels, k, v) for k, v in changed) and holds_place(s):
            wake.append((namespace, other.name))
    return wake


# ---- cleanup.maxSessionsPerNamespace -------------------------------------------------------------
Rank = tuple[str, str]


DEFAULT_MAX_SESSIONS_PER_NAMESPACE = 1000
"""The cap of a namespace no AgentSessionPolicy caps (issue 49 item 2: an uncapped namespace let one tenant
grow the operator for everyone). The operator's --max-sessions-per-namespace (chart: maxSessionsPerNamespace)
sets another, 0 none; a policy's cleanup.maxSessionsPerNamespace sets the namespace's own, higher or lower."""


@dataclass(frozen=True)
class NamespaceLimit:
    """At most ``max`` unfinished sessions in ``namespace`` (AgentSessionPolicy ``policy`` sets it; empty:
    the operator's default)."""

    namespace: str
    max: int
    policy: str


def namespace_limit(
    namespace: str | None, policies: Iterable[Mapping[str, Any]], default: int = DEFAULT_MAX_SESSIONS_PER_NAMESPACE
) -> NamespaceLimit | None:
    """The smallest ``cleanup.maxSessionsPerNamespace`` among the policies of ``namespace`` (selectors are
    not read: the cap holds for every session there), a tie going to the first policy by name; without
    any, the operator's ``default`` (0: none)."""
    best: NamespaceLimit | None = None
    for body in sorted(policies, key=lambda b: Policy(b).name):
        found = Policy(body)
        if (found.namespace or namespace) != namespace:
            continue
        value = found.cleanup.get("maxSessionsPerNamespace")
        if isinstance(value, int) and not isinstance(value, bool) and (best is None or value < best.max):
            best = NamespaceLimit(str(namespace), value, found.name)
    if best is None and default > 0:
        return NamespaceLimit(str(namespace), default, "")
    return best


def namespace_sentence(ahead: int, names: Sequence[str], limit: NamespaceLimit) -> str:
    """Why a session is over its namespace's cap, naming some of the sessions holding the places."""
    shown = ", ".join(names[:NAMES_SHOWN])
    more = f" and {ahead - len(names[:NAMES_SHOWN])} more" if ahead > len(names[:NAMES_SHOWN]) else ""
    listed = f" ({shown}{more})" if shown else ""
    if limit.policy:
        source = (
            f"the policy maximum is {limit.max} per namespace (AgentSessionPolicy {limit.policy}, "
            "cleanup.maxSessionsPerNamespace)"
        )
    else:
        source = (
            f"the operator's default is {limit.max} per namespace (--max-sessions-per-namespace; an "
            "AgentSessionPolicy's cleanup.maxSessionsPerNamespace sets this namespace's own)"
        )
    return (
        f"{ahead} unfinished AgentSessions already hold a place in namespace {limit.namespace}{listed}; "
        f"{source}; one of them must be deleted or finish first"
    )


def over_namespace_cap(
    session: Mapping[str, Any],
    policies: Iterable[Mapping[str, Any]],
    places: Sequence[Rank],
    *,
    newcomer: bool = False,
    default: int = DEFAULT_MAX_SESSIONS_PER_NAMESPACE,
) -> list[str]:
    """The sentence when ``session`` is over its namespace's cap (empty otherwise).

    ``places``: the ranks (:func:`rank`) of every session of the namespace that holds a place, sorted;
    the session's own rank may be among them. At a pass the places ranked before the session count;
    at admission (``newcomer``) every other place does (the newcomer ranks last)."""
    limit = namespace_limit(Session(session).namespace, policies, default)
    if limit is None or not holds_place(session):
        return []
    mine = rank(session)
    if newcomer:
        names = [name for _, name in places if name != mine[1]]
        ahead = len(names)
    else:
        ahead = bisect.bisect_left(places, mine)
        names = [name for _, name in places[: min(ahead, NAMES_SHOWN)]]
    if ahead < limit.max:
        return []
    return [namespace_sentence(ahead, names, limit)]


def namespace_to_wake(
    freed: Rank,
    places: Sequence[Rank],
    policies: Iterable[Mapping[str, Any]],
    namespace: str,
    default: int = DEFAULT_MAX_SESSIONS_PER_NAMESPACE,
) -> list[str]:
    """A place ranked ``freed`` went (``places``: those left, sorted): the session that moved under the
    cap, if any, is judged again now (it may create its claim, or be resumed). Only the one at the cap's
    edge moved; every later one is still over."""
    limit = namespace_limit(namespace, policies, default)
    if limit is None or bisect.bisect_left(places, freed) >= limit.max:
        return []
    return [name for _, name in places[limit.max - 1 : limit.max]]


# ---- what one session's change wakes (the reconciler only schedules it) ----------------------------
@dataclass(frozen=True)
class WakeUps:
    """Whom a session's change (created, changed, deleted) makes the reconciler judge again."""

    freed: tuple[str, ...] = ()
    """Sessions that moved under maxSessionsPerNamespace: a place ahead of them freed."""
    moved: tuple[tuple[str, str], ...] = ()
    """Sessions ranked after it in a capped label group it entered or left (maxSessionsPerLabel)."""
    matched_changed: bool = False
    """Its labels changed (or it came or went): the policies' matchedSessions are refreshed soon."""


def _labels(body: Mapping[str, Any] | None) -> Mapping[str, str]:
    return Obj(body).labels


def wake_ups(
    namespace: str,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    policies: Sequence[Mapping[str, Any]],
    cap: int,
    places: Callable[[], Sequence[Rank]],
    sessions: Callable[[], Iterable[Mapping[str, Any]]],
) -> WakeUps:
    """Every namespace is capped (``cap``, a policy's own or none); label groups only where a policy caps
    them. ``places`` and ``sessions`` are read only when a place or a capped group changed: a namespace
    without policies, or a change that moves no place, scans nothing."""
    freed: list[str] = []
    if before is not None and holds_place(before) and (after is None or not holds_place(after)):
        freed = namespace_to_wake(rank(before), places(), policies, namespace, cap)
    if not policies:
        return WakeUps(freed=tuple(freed))
    keys = capped_keys(policies)
    moved = to_wake(before, after, sessions(), keys) if keys else []
    matched = before is None or after is None or _labels(before) != _labels(after)
    return WakeUps(tuple(freed), tuple(moved), matched)
