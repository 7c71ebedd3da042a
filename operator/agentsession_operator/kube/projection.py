"""The copies the cache keeps (issue 49 item 2): what any reader reads of an object and nothing a tenant can
grow without bound, its strings shared. A pure room below the cache and the client: a live listing keeps
the same shape as the cache (kube/client.list_sessions)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from agentsession_api import activity, names
from agentsession_api.types import MAX_SESSION_LABELS

INTERN_MAX = 128
"""Strings up to this long are shared between cached objects: keys, reasons, phases, and the conditions' messages
(the same for every session waiting on one missing pool in a namespace, often longer than 64)."""


def _compact(value: Any) -> Any:
    """A copy whose keys and short strings are interned: every object decoded from JSON has its own copy
    of each key ("lastTransitionTime", "observedGeneration", ...) and of values such as "True" or a
    reason. Shared, the cached objects take about half the memory, for a little CPU per object."""
    if isinstance(value, Mapping):
        return {_intern(k): _compact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return _intern(value)


def _intern(value: Any) -> Any:
    # Plain str only: a str subclass (our StrEnum phases, in bodies our own writes return) cannot be.
    return sys.intern(value) if type(value) is str and len(value) <= INTERN_MAX else value


def slim(body: Mapping[str, Any], drop_spec: tuple[str, ...] = ()) -> dict[str, Any]:
    """A cached copy without what no decision reads: managedFields (often the bulk of an object) and,
    for Sandboxes, the pod template; its strings shared (_compact). Thousands of cached objects stay
    small."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    out = {**body, "metadata": meta}
    if drop_spec and isinstance(body.get("spec"), Mapping):
        out["spec"] = {k: v for k, v in body["spec"].items() if k not in drop_spec}
    compact: dict[str, Any] = _compact(out)
    return compact


SESSION_METADATA = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "labels",
        "annotations",
    }
)
"""The session metadata a cached copy keeps: what any reader of the cache reads (names and keys, the UID
of every write, versions, ranks, deletion, labels for policies and quotas). managedFields, generateName,
selfLink, finalizers and ownerReferences (any number a tenant adds; deletion is read from
deletionTimestamp; a session's owners are read by no decision) and the like are dropped."""
SESSION_TOP = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
"""The top-level keys kept: spec and status whole (every decision and the status writer read them)."""
SESSION_ANNOTATION_PREFIX = f"{names.GROUP}/"
"""The only annotations kept: ours (the activity report). A kubectl last-applied-configuration (a copy of
the whole spec), kopf's or a tenant's own annotations are read by no decision."""


def session_projection(body: Mapping[str, Any]) -> dict[str, Any]:
    """The cached copy of a session: the fields above and nothing else, strings shared (_compact). Both
    sides of every comparison of cached bodies (kube/fairness, decisions/quota.to_wake) are projections.

    Its cost does not grow with what a tenant writes where no decision reads the bytes (issue 49 item 2):
    env values and annotation values (pod and volume templates') are emptied, keeping names and keys for
    the policies; an over-long activity report is kept as what it parses to. The claim, which carries
    them, is built from the session read live (kube/session_pass)."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k in SESSION_METADATA}
    if "labels" in meta:
        meta["labels"] = _bounded_labels(meta["labels"])
    annotations = meta.pop("annotations", None) or {}
    ours = {k: _bounded_report(k, v) for k, v in annotations.items() if k.startswith(SESSION_ANNOTATION_PREFIX)}
    if ours:
        meta["annotations"] = ours
    out = {k: v for k, v in body.items() if k in SESSION_TOP}
    out["metadata"] = meta
    if isinstance(out.get("spec"), Mapping):
        out["spec"] = _spec_without_free_values(out["spec"])
    projected: dict[str, Any] = _compact(out)
    return projected


def _bounded_labels(labels: Any) -> Any:
    """At most MAX_SESSION_LABELS + 1 labels (the first by key): a session over the bound is refused
    (decisions/policy), which the one extra label still shows; it is never judged on its labels."""
    if not isinstance(labels, Mapping) or len(labels) <= MAX_SESSION_LABELS:
        return labels
    return {key: labels[key] for key in sorted(labels)[: MAX_SESSION_LABELS + 1]}


def _keys_only(values: Any) -> Any:
    return {k: "" for k in values} if isinstance(values, Mapping) else values


def _spec_without_free_values(spec: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(spec)
    if isinstance(spec.get("env"), list):
        out["env"] = [
            {k: v for k, v in e.items() if k != "value"} if isinstance(e, Mapping) else e for e in spec["env"]
        ]
    if "podAnnotations" in spec:
        out["podAnnotations"] = _keys_only(spec["podAnnotations"])
    if isinstance(spec.get("volumeClaimTemplates"), list):
        templates = []
        for template in spec["volumeClaimTemplates"]:
            if isinstance(template, Mapping) and isinstance(template.get("metadata"), Mapping):
                tmeta = dict(template["metadata"])
                for field in ("annotations", "labels"):
                    if field in tmeta:
                        tmeta[field] = _keys_only(tmeta[field])
                template = {**template, "metadata": tmeta}
            templates.append(template)
        out["volumeClaimTemplates"] = templates
    return out


def _bounded_report(key: str, value: Any) -> Any:
    """The activity annotation within activity.MAX_LENGTH: a report padded with blanks (the format allows
    them) parses the same stripped; anything longer parses to nothing, as its digest does."""
    if key != names.ANNOTATION_ACTIVITY or not isinstance(value, str) or len(value) <= activity.MAX_LENGTH:
        return value
    stripped = value.strip()
    return stripped if len(stripped) <= activity.MAX_LENGTH else activity.report_key(value)
