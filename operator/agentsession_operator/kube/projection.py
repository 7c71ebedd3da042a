"""The copies the cache keeps (issue 49 item 2): what any reader reads of an object and nothing a tenant can
grow without bound, its strings shared. A pure room below the cache and the client: a live listing keeps
the same shape as the cache (kube/client.list_sessions)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
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
    (decisions/policy_violations), which the one extra label still shows; it is never judged on its labels."""
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


MAX_CACHED_OWNERS = 4
"""Owner references a cached child keeps, ours only (AgentSession, this API group): a decision reads the
one whose UID is its session's, and a tenant's claim may carry thousands."""


MAX_CACHED_SPEC = 64 * 1024
"""A cached child's spec, in JSON bytes, once projected: the operator's own claims and NetworkPolicies are a
few KiB; a larger one (a tenant's labelled as ours, or one edited) is kept as TRUNCATED_SPEC, which differs
from anything the operator builds, so a session's own is put back."""
TRUNCATED_SPEC: dict[str, Any] = {"agentsession.dev/truncated": True}


def _is_session_owner(ref: Mapping[str, Any]) -> bool:
    return ref.get("kind") == names.SESSION_KIND and str(ref.get("apiVersion", "")).startswith(
        SESSION_ANNOTATION_PREFIX
    )


def _bounded_metadata(body: Mapping[str, Any], owner: Callable[[Mapping[str, Any]], bool]) -> dict[str, Any]:
    """A child's metadata as the cache keeps it: the session's kept keys, our annotations only, and the owner
    references ``owner`` accepts (at most MAX_CACHED_OWNERS). Labels are the caller's to bound."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k in SESSION_METADATA or k == "ownerReferences"}
    annotations = meta.pop("annotations", None)
    if isinstance(annotations, Mapping):
        ours = {k: v for k, v in annotations.items() if isinstance(k, str) and k.startswith(SESSION_ANNOTATION_PREFIX)}
        if ours:
            meta["annotations"] = ours
    if "ownerReferences" in meta:
        refs = meta["ownerReferences"] if isinstance(meta["ownerReferences"], list) else []
        meta["ownerReferences"] = [ref for ref in refs if isinstance(ref, Mapping) and owner(ref)][:MAX_CACHED_OWNERS]
    return meta


def child_projection(body: Mapping[str, Any]) -> dict[str, Any]:
    """The cached copy of a SandboxClaim or NetworkPolicy the operator watches (issue 49 item 2): what
    :func:`slim` keeps, less what a session or a tenant can grow without bound. Labels are bounded as a
    session's; annotations other than ours are dropped; only our owner references stay (at most
    MAX_CACHED_OWNERS); a claim's env (read by no decision: a claim is built from the session) is dropped,
    its pod annotations' values other than ours (copies of its session's) emptied; a spec still over
    MAX_CACHED_SPEC is TRUNCATED_SPEC. The rest of the spec and the status stay: decisions read the
    claim's lifecycle, pool and restore annotation and the NetworkPolicy's rules, and the controller
    writes the status."""
    meta = _bounded_metadata(body, _is_session_owner)
    if "labels" in meta:
        meta["labels"] = _bounded_labels(meta["labels"])
    out = {k: v for k, v in body.items() if k in SESSION_TOP}
    out["metadata"] = meta
    spec = body.get("spec")
    if isinstance(spec, Mapping):
        child = _child_spec(spec)
        out["spec"] = child if len(json.dumps(child, default=str)) <= MAX_CACHED_SPEC else TRUNCATED_SPEC
    projected: dict[str, Any] = _compact(out)
    return projected


SANDBOX_LABEL_PREFIXES = ("agents.x-k8s.io/", SESSION_ANNOTATION_PREFIX)
"""The Sandbox labels a cached copy keeps: agent-sandbox's (its launch type, read for the Ready message) and
ours. Any other is a tenant's, read by no decision (issue 49 item 2)."""


def sandbox_projection(body: Mapping[str, Any], drop_spec: tuple[str, ...] = ()) -> dict[str, Any]:
    """The cached copy of a Sandbox: :func:`slim`'s, with metadata a tenant allowed to patch its namespace's
    Sandboxes cannot grow (issue 49 item 2): labels agent-sandbox's and ours only (bounded as a session's),
    annotations ours only, owner references the SandboxClaim ones only (at most MAX_CACHED_OWNERS: a decision
    reads the one whose UID is its claim's)."""
    small = slim({**body, "metadata": {}}, drop_spec)
    meta = _bounded_metadata(body, lambda ref: ref.get("kind") == "SandboxClaim")
    labels = meta.pop("labels", None)
    if isinstance(labels, Mapping):
        kept = {k: v for k, v in labels.items() if isinstance(k, str) and k.startswith(SANDBOX_LABEL_PREFIXES)}
        if kept:
            meta["labels"] = _bounded_labels(kept)
    small["metadata"] = _compact(meta)
    return small


def _child_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    out = _spec_without_free_values(spec)
    out.pop("env", None)
    pod = spec.get("additionalPodMetadata")
    if isinstance(pod, Mapping):
        pod = dict(pod)
        annotations = pod.get("annotations")
        if isinstance(annotations, Mapping):
            pod["annotations"] = {
                k: (v if isinstance(k, str) and k.startswith(SESSION_ANNOTATION_PREFIX) else "")
                for k, v in annotations.items()
            }
        if "labels" in pod:
            pod["labels"] = _bounded_labels(pod["labels"])
        out["additionalPodMetadata"] = pod
    return out
