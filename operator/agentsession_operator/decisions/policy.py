"""AgentSessionPolicy: which policies apply to a session, how several combine, and what a session breaks.

Merge rules (:func:`merge_policies`), "most restrictive wins":

* Policies are taken in alphabetical order of name; that order breaks every tie.
* Defaults (``warmPoolRef``, ``ttl``, ``idleTimeout``, ``idleAction``): the first policy that sets one wins.
  Default ``labels``/``podLabels`` merge key by key, the first policy setting a key wins.
* ``maxTtl``, ``maxIdleTimeout``, ``maxStorage``, ``maxCheckpointSize``, ``cleanup.deleteFinishedAfter``: the
  smallest wins.
* ``allowForks``, ``allowHibernate``: any false forbids (the first such policy by name is the one named).
* ``allowedWarmPools``, ``allowedStorageClasses``: the intersection of every list given.
* ``podAnnotations``/``volumeAnnotations`` (key globs): like ``env``, every deny applies and each allow list
  is its own constraint. Built in, whatever the policies: :data:`names.DENIED_ENV_DEFAULTS` and the
  reserved label domains (with subdomains).
* ``env.deny``, ``labels.required``, ``labels.values``: the union (every deny pattern, required label and
  value pattern applies; a label must match every pattern given for its key).
* ``env.allow`` and ``labels.allowedPrefixes``: each policy's list is its own constraint and a name must
  satisfy all of them, which is the intersection of what each list allows.
* ``cleanup.maxSessionsPerLabel``: the smallest ``max`` per label key.
* ``egress``: each policy's section is its own constraint, so only what every one of them allows
  (folded by :func:`network.merge_egress`); no section at all: no egress.

Forks (:mod:`lineage`): a policy that selects any session a fork's data came from (``status.lineage``:
its source, the source's source, ...) applies to the fork as if it selected it, so the fork is judged by
the union of both sets and the rules above only get stricter. Such a policy's ``maxTtl`` counts from that
ancestor's creation (:func:`lineage_max_ttl`): a fork, or a chain of them, ends when the source's data would.

Resolution (:func:`resolve`): a session's own value, else the policy default; TTL and idle timeout are
then capped by the maxima (an unset TTL under a ``maxTtl`` becomes ``maxTtl``). Once the claim exists
the warm pool in ``status.resolved`` stays, because a claim's pool cannot change.

Which labels the label rules read: ``required`` reads the session's ``metadata.labels`` (what selectors
and ``maxSessionsPerLabel`` see); ``allowedPrefixes`` reads ``spec.labels`` and ``spec.podLabels`` (what
the operator copies onto the claim and Pod); ``values`` reads all three.

Over 500 lines on purpose: selection, merging, resolution and violations are the four steps of one
rule set (the merge rules above); each section is pure and tested alone, and splitting them would
scatter the "most restrictive wins" contract over several files.
"""

from __future__ import annotations

import fnmatch
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

import re2  # google-re2: linear time, so a policy cannot stall the loop

from agentsession_api import cel_rules, names, patterns, phases
from agentsession_api.durations import format_duration, parse_duration
from agentsession_api.phases import IdleAction
from agentsession_api.quantities import format_quantity, parse_quantity
from agentsession_api.timestamps import format_time, parse_time
from agentsession_api.types import MAX_SESSION_LABELS
from agentsession_operator.decisions import conditions, hibernate, lineage
from agentsession_operator.decisions.resolved import Resolved
from agentsession_operator.decisions.selectors import selector_matches

T = TypeVar("T")


@dataclass(frozen=True)
class Sourced(Generic[T]):
    """A value and the policy (or policies) it came from, so messages can name them."""

    value: T
    policy: str
    text: str = ""

    def origin(self) -> str:
        """``(AgentSessionPolicy a)`` or ``(AgentSessionPolicies a, b)``."""
        kind = "AgentSessionPolicies" if ", " in self.policy else "AgentSessionPolicy"
        return f"({kind} {self.policy})"


@dataclass(frozen=True)
class SessionLimit:
    """At most ``max`` unfinished sessions per value of label ``key`` (``across``: carrying ``key``, any value)."""

    key: str
    max: int
    policy: str
    across: bool = False


@dataclass(frozen=True)
class EffectivePolicy:
    """Every applicable policy folded into one (see the module docstring for the rules)."""

    policies: tuple[str, ...] = ()
    default_warm_pool: Sourced[str] | None = None
    default_ttl: Sourced[timedelta] | None = None
    default_idle_timeout: Sourced[timedelta] | None = None
    default_idle_action: Sourced[str] | None = None
    default_labels: Mapping[str, Sourced[str]] = field(default_factory=dict)
    default_pod_labels: Mapping[str, Sourced[str]] = field(default_factory=dict)
    max_ttl: Sourced[timedelta] | None = None
    max_ttl_grace: Sourced[timedelta] | None = None
    max_idle_timeout: Sourced[timedelta] | None = None
    max_storage: Sourced[int] | None = None
    allowed_warm_pools: Sourced[frozenset[str]] | None = None
    env_allow: tuple[Sourced[tuple[str, ...]], ...] = ()
    env_deny: tuple[Sourced[str], ...] = ()
    pod_annotation_allow: tuple[Sourced[tuple[str, ...]], ...] = ()
    pod_annotation_deny: tuple[Sourced[str], ...] = ()
    volume_annotation_allow: tuple[Sourced[tuple[str, ...]], ...] = ()
    volume_annotation_deny: tuple[Sourced[str], ...] = ()
    allowed_storage_classes: Sourced[frozenset[str]] | None = None
    forks_denied: Sourced[bool] | None = None
    """limits.allowForks false in some applicable policy (the first by name)."""
    hibernate_denied: Sourced[bool] | None = None
    """limits.allowHibernate false in some applicable policy (the first by name)."""
    max_checkpoint: Sourced[int] | None = None
    """The smallest limits.maxCheckpointSize, in bytes."""
    max_hibernated: Sourced[int] | None = None
    """The smallest limits.maxHibernatedSize, in bytes (the namespace's hibernated sessions together)."""
    required_labels: tuple[Sourced[str], ...] = ()
    allowed_prefixes: tuple[Sourced[tuple[str, ...]], ...] = ()
    label_values: tuple[Sourced[tuple[str, str]], ...] = ()
    delete_finished_after: Sourced[timedelta] | None = None
    session_limits: tuple[SessionLimit, ...] = ()
    egress: tuple[Sourced[Mapping[str, Any]], ...] = ()
    """Every applicable policy's ``spec.egress``, in name order (decisions.network folds them)."""
    lineage_max_ttl: Sourced[timedelta] | None = None
    """For a fork: the TTL it has left, counted from its own creation, under the maxTtl of the policies
    selecting its ancestors, each counted from that ancestor's creation (:func:`lineage_max_ttl`; zero or
    less: nothing left)."""
    errors: tuple[str, ...] = ()
    """Values that failed to parse (admission should prevent them); such values are ignored."""


EMPTY_POLICY = EffectivePolicy()


# --- Selection ---------------------------------------------------------------------------------------
def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def matches(policy: Mapping[str, Any], session_labels: Mapping[str, str] | None) -> bool:
    """True when the policy's ``spec.selector`` selects a session with these metadata labels."""
    return selector_matches((policy.get("spec") or {}).get("selector"), session_labels)


def selects(
    policy: Mapping[str, Any], session: Mapping[str, Any], ancestors: Sequence[lineage.Ancestor] | None = None
) -> bool:
    """True when the policy, of the session's namespace, selects the session's metadata labels or, for a
    fork, the labels of any session its data came from (``status.lineage``, see :mod:`lineage`)."""
    meta = session.get("metadata") or {}
    if (policy.get("metadata") or {}).get("namespace") != meta.get("namespace"):
        return False
    if matches(policy, meta.get("labels") or {}):
        return True
    admitted = admitted_labels(session)
    if admitted is not None and matches(policy, admitted):
        return True
    found = lineage.ancestors(session) if ancestors is None else ancestors
    return any(matches(policy, ancestor.labels) for ancestor in found)


def admitted_labels(session: Mapping[str, Any]) -> Mapping[str, str] | None:
    """``status.admittedLabels``: the labels the operator first judged the session with (issue 49 item 6).
    Policies selecting them keep selecting it: admission refuses a relabel that leaves a policy
    (decisions/admission.departures), and this holds the same rule at reconcile when admission did not run."""
    recorded = (session.get("status") or {}).get("admittedLabels")
    if not isinstance(recorded, Mapping):
        return None
    return {str(k): str(v) for k, v in recorded.items()}


def labels_to_admit(session: Mapping[str, Any]) -> dict[str, str] | None:
    """The labels to record as ``status.admittedLabels`` at this pass: the session's own, once (None when
    recorded already, or over MAX_SESSION_LABELS: such a session is refused, see violations)."""
    if admitted_labels(session) is not None:
        return None
    labels = (session.get("metadata") or {}).get("labels") or {}
    if not isinstance(labels, Mapping) or len(labels) > MAX_SESSION_LABELS:
        return None
    return {str(k): str(v) for k, v in labels.items()}


def applicable_policies(session: Mapping[str, Any], policies: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Policies that :func:`select <selects>` the session, sorted by name."""
    ancestors = lineage.ancestors(session)
    return sorted((p for p in policies if selects(p, session, ancestors)), key=_name)


def lineage_max_ttl(session: Mapping[str, Any], policies: Iterable[Mapping[str, Any]]) -> Sourced[timedelta] | None:
    """For a fork: how long it may live, counted from its own creation, so that it ends no later than any
    ancestor's creation plus the maxTtl of the policies selecting that ancestor's labels (the smallest such
    bound). None for a session that is no fork, or when no such policy sets a maxTtl."""
    ancestors = lineage.ancestors(session)
    created = parse_time((session.get("metadata") or {}).get("creationTimestamp"))
    if not ancestors or created is None:
        return None
    namespace = (session.get("metadata") or {}).get("namespace")
    policies = [p for p in policies if (p.get("metadata") or {}).get("namespace") == namespace]
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


# --- Merging -----------------------------------------------------------------------------------------
class _Merger:
    """Accumulates policies in name order; one instance per merge."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {
            "default_labels": {},
            "default_pod_labels": {},
            "env_allow": [],
            "env_deny": [],
            "pod_annotation_allow": [],
            "pod_annotation_deny": [],
            "volume_annotation_allow": [],
            "volume_annotation_deny": [],
            "required_labels": [],
            "allowed_prefixes": [],
            "label_values": [],
            "egress": [],
        }
        self.limits: dict[tuple[str, bool], SessionLimit] = {}
        self.pools: Sourced[frozenset[str]] | None = None
        self.classes: Sourced[frozenset[str]] | None = None
        self.errors: list[str] = []

    def first(self, attr: str, value: Sourced[Any] | None) -> None:
        if value is not None and attr not in self.values:
            self.values[attr] = value

    def smallest(self, attr: str, value: Sourced[Any] | None) -> None:
        if value is not None and (attr not in self.values or value.value < self.values[attr].value):
            self.values[attr] = value

    def duration(self, name: str, path: str, text: Any) -> Sourced[timedelta] | None:
        if text is None:
            return None
        try:
            return Sourced(parse_duration(text), name, text)
        except ValueError as err:
            self.errors.append(f"AgentSessionPolicy {name}: {path}: {err}")
            return None

    def add(self, policy: Mapping[str, Any]) -> None:
        name = _name(policy)
        spec = policy.get("spec") or {}
        defaults, limits = spec.get("defaults") or {}, spec.get("limits") or {}
        label_rules, cleanup = spec.get("labels") or {}, spec.get("cleanup") or {}

        pool = (defaults.get("warmPoolRef") or {}).get("name")
        self.first("default_warm_pool", Sourced(pool, name, pool) if pool else None)
        self.first("default_ttl", self.duration(name, "spec.defaults.ttl", defaults.get("ttl")))
        self.first(
            "default_idle_timeout", self.duration(name, "spec.defaults.idleTimeout", defaults.get("idleTimeout"))
        )
        action = defaults.get("idleAction")
        self.first("default_idle_action", Sourced(action, name, action) if action else None)
        for target, source in (("default_labels", "labels"), ("default_pod_labels", "podLabels")):
            for key, value in (defaults.get(source) or {}).items():
                self.values[target].setdefault(key, Sourced(value, name, value))

        self.smallest("max_ttl", self.duration(name, "spec.limits.maxTtl", limits.get("maxTtl")))
        self.smallest(
            "max_ttl_grace",
            self.duration(name, "spec.limits.maxTtlGracePeriod", limits.get("maxTtlGracePeriod")),
        )
        self.smallest(
            "max_idle_timeout", self.duration(name, "spec.limits.maxIdleTimeout", limits.get("maxIdleTimeout"))
        )
        self.smallest("max_storage", self._quantity(name, limits.get("maxStorage")))
        self.smallest("max_checkpoint", self._quantity(name, limits.get("maxCheckpointSize"), "maxCheckpointSize"))
        self.smallest("max_hibernated", self._quantity(name, limits.get("maxHibernatedSize"), "maxHibernatedSize"))
        self.smallest(
            "delete_finished_after",
            self.duration(name, "spec.cleanup.deleteFinishedAfter", cleanup.get("deleteFinishedAfter")),
        )
        if limits.get("allowedWarmPools") is not None:
            allowed = frozenset(limits["allowedWarmPools"])
            self.pools = (
                Sourced(allowed, name)
                if self.pools is None
                else Sourced(self.pools.value & allowed, f"{self.pools.policy}, {name}")
            )

        if limits.get("allowedStorageClasses") is not None:
            classes = frozenset(limits["allowedStorageClasses"])
            self.classes = (
                Sourced(classes, name)
                if self.classes is None
                else Sourced(self.classes.value & classes, f"{self.classes.policy}, {name}")
            )
        if limits.get("allowForks") is False:
            self.first("forks_denied", Sourced(True, name))
        if limits.get("allowHibernate") is False:
            self.first("hibernate_denied", Sourced(True, name))
        for field_name, attr in (("podAnnotations", "pod_annotation"), ("volumeAnnotations", "volume_annotation")):
            rules = limits.get(field_name) or {}
            if rules.get("allow") is not None:
                self.values[f"{attr}_allow"].append(Sourced(tuple(rules["allow"]), name))
            self.values[f"{attr}_deny"] += [Sourced(glob, name) for glob in rules.get("deny") or []]

        env = limits.get("env") or {}
        if env.get("allow") is not None:
            self.values["env_allow"].append(Sourced(tuple(env["allow"]), name))
        self.values["env_deny"] += [Sourced(glob, name) for glob in env.get("deny") or []]
        self.values["required_labels"] += [Sourced(key, name) for key in label_rules.get("required") or []]
        if label_rules.get("allowedPrefixes") is not None:
            self.values["allowed_prefixes"].append(Sourced(tuple(label_rules["allowedPrefixes"]), name))
        self.values["label_values"] += [
            Sourced((key, regex), name) for key, regex in (label_rules.get("values") or {}).items()
        ]

        if isinstance(spec.get("egress"), Mapping):
            self.values["egress"].append(Sourced(spec["egress"], name))

        limit = cleanup.get("maxSessionsPerLabel") or {}
        if limit.get("key") and isinstance(limit.get("max"), int):
            across = limit.get("countAcrossValues") is True
            current = self.limits.get((limit["key"], across))
            if current is None or limit["max"] < current.max:
                self.limits[(limit["key"], across)] = SessionLimit(limit["key"], limit["max"], name, across)

    def _quantity(self, name: str, text: Any, field_name: str = "maxStorage") -> Sourced[int] | None:
        if text is None:
            return None
        try:
            return Sourced(parse_quantity(text), name, text)
        except ValueError as err:
            self.errors.append(f"AgentSessionPolicy {name}: spec.limits.{field_name}: {err}")
            return None

    def result(self, names: tuple[str, ...]) -> EffectivePolicy:
        values = dict(self.values)
        for attr in (
            "env_allow",
            "env_deny",
            "pod_annotation_allow",
            "pod_annotation_deny",
            "volume_annotation_allow",
            "volume_annotation_deny",
            "required_labels",
            "allowed_prefixes",
            "label_values",
            "egress",
        ):
            values[attr] = tuple(values[attr])
        return EffectivePolicy(
            policies=names,
            allowed_warm_pools=self.pools,
            allowed_storage_classes=self.classes,
            session_limits=tuple(self.limits[k] for k in sorted(self.limits)),
            errors=tuple(self.errors),
            **values,
        )


def merge_policies(policies: Iterable[Mapping[str, Any]]) -> EffectivePolicy:
    """Fold the given (already selected) policies into one; see the module docstring for the rules."""
    ordered = sorted(policies, key=_name)
    merger = _Merger()
    for policy in ordered:
        merger.add(policy)
    return merger.result(tuple(_name(p) for p in ordered))


def policy_errors(policy: Mapping[str, Any]) -> list[str]:
    """Problems in one policy the schema cannot catch (bad regular expressions, unparsable values)."""
    problems = list(merge_policies([policy]).errors)
    for key, regex in (((policy.get("spec") or {}).get("labels") or {}).get("values") or {}).items():
        error = _regex_error(regex)
        if error:
            problems.append(f"spec.labels.values[{key}] {regex!r} is not a valid regular expression: {error}")
    return problems


COND_VALID = "Valid"


def policy_status(policy: Mapping[str, Any], sessions: Iterable[Mapping[str, Any]], now: datetime) -> dict[str, Any]:
    """The policy's own status: ``Valid`` (False with every problem, e.g. a pattern RE2 refuses, so GitOps
    tools show it unhealthy), ``matchedSessions`` (sessions of its namespace it selects now) and
    ``observedGeneration``."""
    meta = policy.get("metadata") or {}
    matched = sum(1 for s in sessions if selects(policy, s))
    problems = policy_errors(policy)
    generation = meta.get("generation")
    return {
        "observedGeneration": generation,
        "matchedSessions": matched,
        "conditions": conditions.set_condition(
            ((policy.get("status") or {}).get("conditions")),
            COND_VALID,
            not problems,
            "InvalidSpec" if problems else "Valid",
            "; ".join(problems) if problems else "the policy parsed and every pattern compiles",
            now,
            generation,
        ),
    }


# --- Resolution --------------------------------------------------------------------------------------
def _spec(session: Mapping[str, Any]) -> Mapping[str, Any]:
    return session.get("spec") or {}


def _spec_duration(spec: Mapping[str, Any], key: str) -> timedelta | None:
    try:
        return parse_duration(spec[key]) if spec.get(key) is not None else None
    except ValueError:
        return None  # admission refuses these; violations() reports it should one slip through


def _capped(value: timedelta | None, cap: Sourced[timedelta] | None) -> timedelta | None:
    if cap is None:
        return value
    return cap.value if value is None else min(value, cap.value)


def _stricter(a: Sourced[timedelta] | None, b: Sourced[timedelta] | None) -> Sourced[timedelta] | None:
    if a is None or b is None:
        return a or b
    return a if a.value <= b.value else b


def _left(value: Sourced[timedelta] | None) -> Sourced[timedelta] | None:
    """A fork's lineage TTL as a cap: never below zero (a fork with nothing left expires at once)."""
    if value is None or value.value > timedelta(0):
        return value
    return Sourced(timedelta(0), value.policy, value.text)


def _recorded(text: Any) -> Sourced[timedelta] | None:
    try:
        return Sourced(parse_duration(text), "status.resolved") if text else None
    except ValueError:
        return None


DEFAULT_MAX_TTL_GRACE = timedelta(hours=1)
"""How long a running session keeps its former expiry after maxTtl is lowered, unless a policy says."""


@dataclass(frozen=True)
class TtlCap:
    """The maxTtl in force for a running session, and a lowered one waiting for its grace period."""

    max_ttl: Sourced[timedelta] | None
    """What status.resolved.maxTtl records (the former maximum while a lowered one is pending)."""
    cap: timedelta | None
    """What the TTL is capped by now: during the grace period, the lowered maximum but never ending
    the session before the grace period does."""
    pending: timedelta | None = None
    pending_at: datetime | None = None


def max_ttl_in_force(
    recorded: Sourced[timedelta] | None,
    current: Sourced[timedelta] | None,
    pending: tuple[timedelta, datetime] | None,
    created: datetime | None,
    now: datetime | None,
    grace: timedelta,
) -> TtlCap:
    """maxTtl for a session that runs: a loosened one never applies (the recorded one holds), a lowered
    one applies after ``grace`` counted from the pass that first saw it (``pending`` keeps that moment).

    Until then the session may still run until ``pending_at`` even if it is older than the new maximum,
    and no longer than its former maximum: cap = min(recorded, max(current, pending_at - created)).
    ``now`` None (a caller that only reads values) never starts nor ends a grace period.
    """
    if recorded is None or current is None or current.value >= recorded.value:
        stricter = _stricter(current, recorded)
        return TtlCap(stricter, stricter.value if stricter else None)
    at = pending[1] if pending is not None else (now + grace if now is not None else None)
    if at is None or created is None:  # nothing to time it by: keep the former maximum
        return TtlCap(recorded, recorded.value)
    if now is not None and now >= at:
        return TtlCap(current, current.value)
    return TtlCap(recorded, min(recorded.value, max(current.value, at - created)), current.value, at)


def resolve(
    session: Mapping[str, Any], effective: EffectivePolicy = EMPTY_POLICY, now: datetime | None = None
) -> Resolved:
    """Settings in force: the session's values, else policy defaults, capped by policy maxima.

    ``now`` lets a lowered maxTtl's grace period start or end (:func:`max_ttl_in_force`)."""
    spec = _spec(session)
    status = session.get("status") or {}
    pool = (spec.get("warmPoolRef") or {}).get("name")
    if not pool and conditions.is_true(status.get("conditions"), phases.COND_CLAIM_CREATED):
        pool = ((status.get("resolved") or {}).get("warmPoolRef") or {}).get("name")
    if not pool and effective.default_warm_pool:
        pool = effective.default_warm_pool.value
    ttl = _spec_duration(spec, "ttl")
    if ttl is None and effective.default_ttl:
        ttl = effective.default_ttl.value
    idle = _spec_duration(spec, "idleTimeout")
    if idle is None and effective.default_idle_timeout:
        idle = effective.default_idle_timeout.value
    action = spec.get("idleAction") or (
        effective.default_idle_action.value if effective.default_idle_action else IdleAction.DELETE
    )
    max_ttl, max_idle = _stricter(effective.max_ttl, _left(effective.lineage_max_ttl)), effective.max_idle_timeout
    ttl_cap = TtlCap(max_ttl, max_ttl.value if max_ttl else None)
    if conditions.is_true(status.get("conditions"), phases.COND_CLAIM_CREATED):
        # Once running, a session only becomes more constrained: the maxima that applied before
        # (status.resolved) still cap it, so unselecting a policy (removing a label) lifts nothing;
        # a lowered maxTtl applies after its grace period.
        before = status.get("resolved") or {}
        pending_value, pending_at = _recorded(before.get("pendingMaxTtl")), parse_time(before.get("pendingMaxTtlAt"))
        ttl_cap = max_ttl_in_force(
            _recorded(before.get("maxTtl")),
            max_ttl,
            (pending_value.value, pending_at) if pending_value and pending_at else None,
            parse_time((session.get("metadata") or {}).get("creationTimestamp")),
            now,
            effective.max_ttl_grace.value if effective.max_ttl_grace else DEFAULT_MAX_TTL_GRACE,
        )
        max_idle = _stricter(max_idle, _recorded(before.get("maxIdleTimeout")))
    return Resolved(
        warm_pool=pool or None,
        ttl=ttl if ttl_cap.cap is None else (ttl_cap.cap if ttl is None else min(ttl, ttl_cap.cap)),
        idle_timeout=_capped(idle, max_idle),
        max_ttl=ttl_cap.max_ttl.value if ttl_cap.max_ttl else None,
        max_idle_timeout=max_idle.value if max_idle else None,
        pending_max_ttl=ttl_cap.pending,
        pending_max_ttl_at=ttl_cap.pending_at,
        idle_action=action,
        labels={**{k: s.value for k, s in effective.default_labels.items()}, **(spec.get("labels") or {})},
        pod_labels={**{k: s.value for k, s in effective.default_pod_labels.items()}, **(spec.get("podLabels") or {})},
        hibernate_forbidden_by=effective.hibernate_denied.origin()[1:-1] if effective.hibernate_denied else None,
        max_checkpoint_bytes=effective.max_checkpoint.value if effective.max_checkpoint else None,
        max_hibernated=(effective.max_hibernated.value, effective.max_hibernated.policy)
        if effective.max_hibernated
        else None,
    )


# --- Violations --------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1024)
def _compiled(regex: str) -> tuple[Any, str | None]:
    """RE2, never Python's re: a policy's pattern runs in time linear in the value, whatever the pattern
    (Python's backtracking took minutes on ``([a-z0-9]+-?)+`` and blocked the event loop). RE2 refuses
    backreferences and lookarounds: such a pattern is reported as invalid."""
    try:
        return re2.compile(regex), None
    except re2.error as err:
        text = err.args[0] if err.args else err
        return None, text.decode(errors="replace") if isinstance(text, bytes) else str(text)


def _regex_error(regex: str) -> str | None:
    return _compiled(regex)[1]


def _pod_label_violations(
    spec: Mapping[str, Any], effective: EffectivePolicy, resolved: Resolved, domains: Sequence[str]
) -> list[str]:
    allowed = " or ".join(domains) + " (or a subdomain)"
    found = []
    own = spec.get("podLabels") or {}
    for key in sorted(resolved.pod_labels):
        where = "spec.podLabels" if key in own else f"default podLabels {effective.default_pod_labels[key].origin()}"
        domain = patterns.key_domain(key)
        if domain is None:
            found.append(
                f'{where} key "{key}" has no domain prefix: agent-sandbox only accepts pod labels under {allowed}, '
                f'e.g. "{domains[0]}/{key}"'
            )
        elif not patterns.in_domain(domain, list(domains)):
            found.append(
                f'{where} key "{key}" uses the domain {domain}, which agent-sandbox does not allow: use {allowed}, '
                "or add the domain to allowed-label-domains in the agent-sandbox-config ConfigMap"
            )
    return found


def _pod_annotation_violations(spec: Mapping[str, Any]) -> list[str]:
    found = []
    for key in sorted(spec.get("podAnnotations") or {}):
        domain = patterns.key_domain(key)
        if (
            domain is not None
            and patterns.in_domain(domain, names.RESTRICTED_ANNOTATION_DOMAINS)
            and key not in names.EXEMPT_ANNOTATION_KEYS
        ):
            found.append(
                f'spec.podAnnotations key "{key}" is in a domain agent-sandbox refuses '
                f"({', '.join(names.RESTRICTED_ANNOTATION_DOMAINS)} and their subdomains)"
            )
    if hibernate.user_names_restore(spec.get("podAnnotations")):
        # The CRD's CEL refuses it too; this covers a session stored before that rule (issue 33).
        found.append(f"spec.podAnnotations key {names.ANNOTATION_RESTORE_FROM} {cel_rules.RESTORE_ANNOTATION_TEXT}")
    return found


def recorded_maxima(session: Mapping[str, Any]) -> dict[str, Sourced[timedelta]]:
    """``maxTtl``/``maxIdleTimeout`` recorded in ``status.resolved`` once the claim exists: a running
    session's maxima only tighten (:func:`resolve`), so these still bound what ``spec`` may ask for."""
    status = session.get("status") or {}
    if not conditions.is_true(status.get("conditions"), phases.COND_CLAIM_CREATED):
        return {}
    before = status.get("resolved") or {}
    found = {}
    for key, field_name in (("ttl", "maxTtl"), ("idleTimeout", "maxIdleTimeout")):
        value = _recorded(before.get(field_name))
        if value is not None:
            found[key] = Sourced(value.value, f"status.resolved.{field_name}", str(before.get(field_name)))
    return found


def _limit_violations(
    spec: Mapping[str, Any],
    effective: EffectivePolicy,
    resolved: Resolved,
    running: bool = False,
    recorded: Mapping[str, Sourced[timedelta]] | None = None,
) -> list[str]:
    found = []
    pools = effective.allowed_warm_pools
    if pools is not None and resolved.warm_pool and resolved.warm_pool not in pools.value:
        where = "spec.warmPoolRef.name" if (spec.get("warmPoolRef") or {}).get("name") else "the default warm pool"
        listed = ", ".join(sorted(pools.value)) or "none"
        found.append(f"{where} {resolved.warm_pool} is not an allowed warm pool (allowed: {listed}) {pools.origin()}")
    for key, cap in (("ttl", effective.max_ttl), ("idleTimeout", effective.max_idle_timeout)):
        text = spec.get(key)
        if text is None:
            continue
        try:
            value = parse_duration(text)
        except ValueError as err:
            found.append(f"spec.{key}: {err}")
            continue
        if running:
            continue  # a running session is held to the caps by resolve() (expiry moves earlier): not stopped
        before = (recorded or {}).get(key)
        if cap is not None and value > cap.value:
            found.append(
                f"spec.{key} {text} exceeds the policy maximum {cap.text or format_duration(cap.value)} {cap.origin()}"
            )
        elif before is not None and value > before.value:
            # The policy allows more now (loosened, or no longer selecting): the maximum that applied stays.
            found.append(
                f"spec.{key} {text} exceeds the maximum {before.text} in force for this session since its sandbox "
                f"was created ({before.policy}): a session's maxima only tighten; delete the session and create "
                "it anew for the new policy's"
            )
    if effective.max_storage is not None:
        total = 0
        for template in spec.get("volumeClaimTemplates") or []:
            size = (((template.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
            try:
                total += parse_quantity(size) if size is not None else 0
            except ValueError as err:
                found.append(f"spec.volumeClaimTemplates: {err}")
        cap_bytes = effective.max_storage
        if total > cap_bytes.value:
            found.append(
                f"spec.volumeClaimTemplates request {format_quantity(total)} in total, more than the policy maximum "
                f"{cap_bytes.text or format_quantity(cap_bytes.value)} {cap_bytes.origin()}"
            )
    return found


def _env_violations(spec: Mapping[str, Any], effective: EffectivePolicy) -> list[str]:
    found = []
    for variable in spec.get("env") or []:
        name = variable.get("name", "")
        builtin = next((glob for glob in names.DENIED_ENV_DEFAULTS if fnmatch.fnmatchcase(name, glob)), None)
        if builtin is not None:
            found.append(
                f"spec.env {name} is denied by the pattern {builtin} (built in: it would run code inside every "
                "process of the sandbox runtime)"
            )
        for deny in effective.env_deny:
            if fnmatch.fnmatchcase(name, deny.value):
                found.append(f"spec.env {name} is denied by the pattern {deny.value} {deny.origin()}")
        for allow in effective.env_allow:
            if not any(fnmatch.fnmatchcase(name, glob) for glob in allow.value):
                listed = ", ".join(allow.value) or "none"
                found.append(f"spec.env {name} matches none of the allowed patterns ({listed}) {allow.origin()}")
    return found


def _label_count_violations(session: Mapping[str, Any]) -> list[str]:
    """A session over the bound on its own labels (the cached copy keeps one more than the bound)."""
    labels = (session.get("metadata") or {}).get("labels") or {}
    if len(labels) <= MAX_SESSION_LABELS:
        return []
    return [
        f"metadata.labels has more than {MAX_SESSION_LABELS} labels: at most {MAX_SESSION_LABELS} are allowed on "
        "an AgentSession (every replica of the operator keeps them in memory); keep the ones policies select "
        "on and move the rest to annotations"
    ]


def _reserved_label_violations(spec: Mapping[str, Any]) -> list[str]:
    """The CRD refuses these too; checked here for sessions stored before that rule covered subdomains."""
    found = []
    for key in sorted(spec.get("labels") or {}):
        domain = patterns.key_domain(key)
        if domain is not None and patterns.in_domain(domain, names.RESERVED_LABEL_DOMAINS):
            found.append(
                f'spec.labels key "{key}" is in a domain reserved for the operator and agent-sandbox '
                f"({', '.join(names.RESERVED_LABEL_DOMAINS)} and their subdomains)"
            )
    return found


def _key_violations(
    where: str,
    keys: Iterable[str],
    allow: Sequence[Sourced[tuple[str, ...]]],
    deny: Sequence[Sourced[str]],
) -> list[str]:
    found = []
    for key in sorted(keys):
        for rule in deny:
            if fnmatch.fnmatchcase(key, rule.value):
                found.append(f"{where} key {key} is denied by the pattern {rule.value} {rule.origin()}")
        for allowed in allow:
            if not any(fnmatch.fnmatchcase(key, glob) for glob in allowed.value):
                listed = ", ".join(allowed.value) or "none"
                found.append(f"{where} key {key} matches none of the allowed patterns ({listed}) {allowed.origin()}")
    return found


def _annotation_and_volume_violations(spec: Mapping[str, Any], effective: EffectivePolicy) -> list[str]:
    """limits.podAnnotations, limits.volumeAnnotations and limits.allowedStorageClasses."""
    found = _key_violations(
        "spec.podAnnotations",
        (spec.get("podAnnotations") or {}).keys(),
        effective.pod_annotation_allow,
        effective.pod_annotation_deny,
    )
    classes = effective.allowed_storage_classes
    for template in spec.get("volumeClaimTemplates") or []:
        name = (template.get("metadata") or {}).get("name", "?")
        where = f"spec.volumeClaimTemplates[{name}]"
        found += _key_violations(
            f"{where}.metadata.annotations",
            ((template.get("metadata") or {}).get("annotations") or {}).keys(),
            effective.volume_annotation_allow,
            effective.volume_annotation_deny,
        )
        if classes is None:
            continue
        listed = ", ".join(sorted(classes.value)) or "none"
        chosen = (template.get("spec") or {}).get("storageClassName")
        if chosen is None:
            found.append(
                f"{where} leaves storageClassName unset (the cluster default storage class), but only these are "
                f"allowed: {listed} {classes.origin()}"
            )
        elif chosen not in classes.value:
            found.append(
                f"{where}.spec.storageClassName {chosen} is not an allowed storage class (allowed: {listed}) "
                f"{classes.origin()}"
            )
    return found


def hibernate_refusals(session: Mapping[str, Any], effective: EffectivePolicy) -> list[str]:
    """limits.allowHibernate false: a session asking for idleAction Hibernate itself is refused at admission.
    Not a violation at reconcile: a session that has it anyway suspends as Suspend (decisions/hibernate.py)."""
    denied = effective.hibernate_denied
    if denied is None or _spec(session).get("idleAction") != IdleAction.HIBERNATE:
        return []
    return [
        f"spec.idleAction: Hibernate is not allowed (spec.limits.allowHibernate: false) {denied.origin()}; use "
        "Suspend (the workspace volume is kept, the processes are not), or ask for the policy to allow Hibernate"
    ]


def _fork_violations(spec: Mapping[str, Any], effective: EffectivePolicy, running: bool) -> list[str]:
    """limits.allowForks: false refuses a new fork (a running one is not stopped for it)."""
    denied = effective.forks_denied
    if running or denied is None or not (spec.get("forkFrom") or {}).get("name"):
        return []
    return [
        f"spec.forkFrom: forks are not allowed (spec.limits.allowForks: false) {denied.origin()}; remove "
        "spec.forkFrom to create a fresh session, or ask for the policy to allow forks"
    ]


def _lineage_violations(effective: EffectivePolicy, running: bool) -> list[str]:
    """A new fork of data whose source's maxTtl is spent: refused (a running one just expires)."""
    left = effective.lineage_max_ttl
    if running or left is None or left.value > timedelta(0):
        return []
    return [
        f"spec.forkFrom: the data it would copy has reached its maxTtl ({left.text}) {left.origin()}: a fork "
        "cannot outlive its source's maximum"
    ]


def _label_violations(session: Mapping[str, Any], effective: EffectivePolicy, resolved: Resolved) -> list[str]:
    found = []
    own_labels = (session.get("metadata") or {}).get("labels") or {}
    for required in effective.required_labels:
        if required.value not in own_labels:
            found.append(f"metadata.labels is missing the required label {required.value} {required.origin()}")
    for where, labels in (("spec.labels", resolved.labels), ("spec.podLabels", resolved.pod_labels)):
        for key in sorted(labels):
            for prefixes in effective.allowed_prefixes:
                if not any(key.startswith(p) for p in prefixes.value):
                    found.append(
                        f"{where} key {key} does not start with an allowed prefix "
                        f"({', '.join(prefixes.value) or 'none'}) {prefixes.origin()}"
                    )
    for rule in effective.label_values:
        key, regex = rule.value
        error = _regex_error(regex)
        for where, labels in (
            ("metadata.labels", own_labels),
            ("spec.labels", resolved.labels),
            ("spec.podLabels", resolved.pod_labels),
        ):
            if key not in labels:
                continue
            if error:
                found.append(
                    f"{where} {key} cannot be checked: the policy pattern {regex!r} is not a valid regular "
                    f"expression ({error}) {rule.origin()}; fix the policy"
                )
            elif not _compiled(regex)[0].fullmatch(labels[key]):
                found.append(f"{where} {key}={labels[key]} does not match the pattern {regex} {rule.origin()}")
    return found


def violations(
    session: Mapping[str, Any],
    effective: EffectivePolicy = EMPTY_POLICY,
    allowed_label_domains: Sequence[str] | None = None,
    *,
    running: bool = False,
    resolved: Resolved | None = None,
) -> list[str]:
    """Every rule the session breaks, one sentence each naming the field, the rule and the policy.

    ``running`` (a claim exists): leaves out ``spec.ttl``/``spec.idleTimeout`` over a maximum, which the
    caps in :func:`resolve` enforce on a running session without stopping it.

    Includes agent-sandbox's own Pod metadata rules (label domain allowlist, annotation blocklist), which
    would otherwise fail the claim later with the terminal reason InvalidMetadata. ``resolved``: the
    pass's own :func:`resolve` of ``session`` under ``effective`` (None: resolved here, as admission does).
    """
    domains = list(allowed_label_domains or names.DEFAULT_ALLOWED_LABEL_DOMAINS)
    spec = _spec(session)
    resolved = resolved if resolved is not None else resolve(session, effective)
    return [
        *_label_count_violations(session),
        *_pod_label_violations(spec, effective, resolved, domains),
        *_pod_annotation_violations(spec),
        *_reserved_label_violations(spec),
        *_limit_violations(spec, effective, resolved, running, recorded_maxima(session)),
        *_env_violations(spec, effective),
        *_annotation_and_volume_violations(spec, effective),
        *_fork_violations(spec, effective, running),
        *_lineage_violations(effective, running),
        *_label_violations(session, effective, resolved),
    ]


ANY_VALUE = "*"
"""The group value of a cap counted across values (``*`` is never a label value, so no group collides)."""


def session_limits_for(session: Mapping[str, Any], effective: EffectivePolicy) -> list[tuple[SessionLimit, str]]:
    """The per-label session caps that apply to this session, each with its group value: the session's value
    of that label, or :data:`ANY_VALUE` for a cap counted across values."""
    labels = (session.get("metadata") or {}).get("labels") or {}
    return [
        (limit, ANY_VALUE if limit.across else labels[limit.key])
        for limit in effective.session_limits
        if limit.key in labels
    ]
