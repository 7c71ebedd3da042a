"""A fork's lineage (``status.lineage``): the sessions its data came from, so their policies hold for it.

A fork copies its source's volumes: the source's data lives on in the fork, and in a fork of the fork.
So every AgentSessionPolicy that selects the source, or any session the source itself descends from,
judges the fork as if it selected it (policy.applicable_policies), whatever labels the fork carries:
egress, allowForks, required labels, every limit. A maxTtl of such a policy counts from that ancestor's
creation, not the fork's (policy.lineage_max_ttl): a chain of forks cannot keep the data longer than the
source's maxTtl allows.

Where it lives: the fork's ``status.lineage``, which only the operator writes (tenants have no access to
the status subresource), so a tenant's write to the fork's labels drops nothing. Each entry is an ancestor's
name, creationTimestamp and metadata.labels as they were when forked: the source itself, then the source's
own recorded lineage. The reconciler records it from the live source before it creates the fork's claim,
and never removes an entry (:func:`merged` only adds); admission judges a new fork with the lineage it would
get (:func:`of_source`). Policies are matched at every pass, so a policy created later that selects an
ancestor's labels holds for the fork too.

Bound: entries with identical labels are kept once (the oldest createdAt, the stricter clock), and at most
:data:`MAX_LINEAGE` distinct ones, each with at most :data:`MAX_LINEAGE_LABELS` labels; a fork whose source
would need more is refused (:func:`problem`) instead of silently forgetting an ancestor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentsession_api.names import MAX_LINEAGE, MAX_LINEAGE_LABELS
from agentsession_api.views import Session
from agentsession_api.views_generated import LineageEntryView


@dataclass(frozen=True)
class Ancestor:
    """One recorded entry of ``status.lineage``."""

    name: str
    created: datetime | None
    labels: Mapping[str, str]


def recorded(session: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """``status.lineage`` as stored (entries that are no mapping are skipped)."""
    entries = Session(session).status.get("lineage") or []
    return [dict(e) for e in entries if isinstance(e, Mapping)] if isinstance(entries, list) else []


def ancestors(session: Mapping[str, Any]) -> list[Ancestor]:
    """The recorded lineage of ``session`` (empty for a session that is no fork, or forked before it existed)."""
    found = []
    for entry in map(LineageEntryView, recorded(session)):
        labels = entry.labels or {}
        found.append(
            Ancestor(
                name=str(entry.name or ""),
                created=entry.created_at,
                labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {},
            )
        )
    return found


def _entry(session: Mapping[str, Any]) -> dict[str, Any]:
    view = Session(session)
    return {
        "name": view.name or None,
        "createdAt": view.created or None,
        "labels": dict(view.labels),
    }


def _key(entry: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in (LineageEntryView(entry).labels or {}).items()))


def _older(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    when_a, when_b = LineageEntryView(a).created_at, LineageEntryView(b).created_at
    if when_a is None or when_b is None:
        return when_a is None and when_b is not None  # unknown counts as oldest: never loosen a clock
    return when_a < when_b


def merged(*lists: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every entry of every list, identical label sets once (the oldest createdAt), in first-seen order."""
    out: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for entries in lists:
        for entry in entries:
            key = _key(entry)
            if key not in out or _older(entry, out[key]):
                out[key] = dict(entry)
    return list(out.values())


def of_source(source: Mapping[str, Any], *older: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The lineage a fork of ``source`` gets: the source as it is now, then the source's recorded lineage.

    ``older`` are the source's own sources, for a source that is a fork whose lineage is not recorded yet
    (admission of a fork of a fork made a moment ago): each is added with its recorded lineage."""
    return merged([_entry(source)], recorded(source), *([_entry(s), *recorded(s)] for s in older))


def problem(lineage: Sequence[Mapping[str, Any]], source: str) -> str | None:
    """Why a fork with this lineage cannot be recorded (and so is refused), or None."""
    if len(lineage) > MAX_LINEAGE:
        return (
            f"spec.forkFrom.name {source}: the source descends from {len(lineage)} sessions with distinct labels "
            f"and a fork records at most {MAX_LINEAGE} (status.lineage, so that their policies hold for it): "
            "fork a session with a shorter lineage"
        )
    crowded = next((e for e in map(LineageEntryView, lineage) if len(e.labels or {}) > MAX_LINEAGE_LABELS), None)
    if crowded is not None:
        return (
            f"spec.forkFrom.name {source}: AgentSession {crowded.name} has more than {MAX_LINEAGE_LABELS} "
            "labels, more than a fork records (status.lineage); remove some of its labels first"
        )
    return None


def with_lineage(session: Mapping[str, Any], lineage: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The session as policies judge it: its recorded lineage and ``lineage`` (only ever more)."""
    status = dict(Session(session).status)
    status["lineage"] = merged(recorded(session), lineage)
    return {**session, "status": status}
