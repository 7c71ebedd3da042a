"""AgentSessionPolicy merged: several policies folded into one :class:`EffectivePolicy`, "most restrictive wins".

The rules (:func:`merge_policies`):

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

The four steps of the one rule set, each in its module: which policies apply (:mod:`policy`), merging
(here), the settings in force (:mod:`policy_resolve`) and what a session breaks (:mod:`policy_violations`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, TypeVar

from agentsession_api.durations import parse_duration
from agentsession_api.quantities import parse_quantity
from agentsession_api.views import Policy

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
    selecting its ancestors, each counted from that ancestor's creation (:func:`policy.lineage_max_ttl`;
    zero or less: nothing left)."""
    errors: tuple[str, ...] = ()
    """Values that failed to parse (admission should prevent them); such values are ignored."""


EMPTY_POLICY = EffectivePolicy()


def policy_name(obj: Mapping[str, Any]) -> str:
    """A policy's ``metadata.name`` (the order policies are merged in)."""
    return Policy(obj).name


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
        name = policy_name(policy)
        spec = Policy(policy).spec_view
        defaults, limits, label_rules, cleanup = spec.defaults, spec.limits, spec.labels, spec.cleanup

        pool = defaults.warm_pool_ref.name
        self.first("default_warm_pool", Sourced(pool, name, pool) if pool else None)
        self.first("default_ttl", self.duration(name, "spec.defaults.ttl", defaults.ttl))
        self.first("default_idle_timeout", self.duration(name, "spec.defaults.idleTimeout", defaults.idle_timeout))
        action = defaults.idle_action
        self.first("default_idle_action", Sourced(action, name, action) if action else None)
        for target, labels in (("default_labels", defaults.labels), ("default_pod_labels", defaults.pod_labels)):
            for key, value in (labels or {}).items():
                self.values[target].setdefault(key, Sourced(value, name, value))

        self.smallest("max_ttl", self.duration(name, "spec.limits.maxTtl", limits.max_ttl))
        self.smallest(
            "max_ttl_grace", self.duration(name, "spec.limits.maxTtlGracePeriod", limits.max_ttl_grace_period)
        )
        self.smallest("max_idle_timeout", self.duration(name, "spec.limits.maxIdleTimeout", limits.max_idle_timeout))
        self.smallest("max_storage", self._quantity(name, limits.max_storage))
        self.smallest("max_checkpoint", self._quantity(name, limits.max_checkpoint_size, "maxCheckpointSize"))
        self.smallest("max_hibernated", self._quantity(name, limits.max_hibernated_size, "maxHibernatedSize"))
        self.smallest(
            "delete_finished_after",
            self.duration(name, "spec.cleanup.deleteFinishedAfter", cleanup.delete_finished_after),
        )
        if limits.allowed_warm_pools is not None:
            allowed = frozenset(limits.allowed_warm_pools)
            self.pools = (
                Sourced(allowed, name)
                if self.pools is None
                else Sourced(self.pools.value & allowed, f"{self.pools.policy}, {name}")
            )

        if limits.allowed_storage_classes is not None:
            classes = frozenset(limits.allowed_storage_classes)
            self.classes = (
                Sourced(classes, name)
                if self.classes is None
                else Sourced(self.classes.value & classes, f"{self.classes.policy}, {name}")
            )
        if limits.allow_forks is False:
            self.first("forks_denied", Sourced(True, name))
        if limits.allow_hibernate is False:
            self.first("hibernate_denied", Sourced(True, name))
        for rules, attr in (
            (limits.pod_annotations, "pod_annotation"),
            (limits.volume_annotations, "volume_annotation"),
        ):
            if rules.allow is not None:
                self.values[f"{attr}_allow"].append(Sourced(tuple(rules.allow), name))
            self.values[f"{attr}_deny"] += [Sourced(glob, name) for glob in rules.deny or []]

        env = limits.env
        if env.allow is not None:
            self.values["env_allow"].append(Sourced(tuple(env.allow), name))
        self.values["env_deny"] += [Sourced(glob, name) for glob in env.deny or []]
        self.values["required_labels"] += [Sourced(key, name) for key in label_rules.required or []]
        if label_rules.allowed_prefixes is not None:
            self.values["allowed_prefixes"].append(Sourced(tuple(label_rules.allowed_prefixes), name))
        self.values["label_values"] += [
            Sourced((key, regex), name) for key, regex in (label_rules.values or {}).items()
        ]

        if spec.egress.present:  # even empty: egress {} means something
            self.values["egress"].append(Sourced(spec.egress.raw, name))

        limit = cleanup.max_sessions_per_label
        if limit.key and isinstance(limit.max, int):
            across = limit.count_across_values is True
            current = self.limits.get((limit.key, across))
            if current is None or limit.max < current.max:
                self.limits[(limit.key, across)] = SessionLimit(limit.key, limit.max, name, across)

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
    ordered = sorted(policies, key=policy_name)
    merger = _Merger()
    for policy in ordered:
        merger.add(policy)
    return merger.result(tuple(policy_name(p) for p in ordered))
