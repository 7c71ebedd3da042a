"""Typed views of an AgentSession as the API server sends it (JSON: camelCase keys, strings for times).

The operator decides over plain dicts (building the pydantic models cost CPU at every pass); these
TypedDicts cost nothing at run time and let mypy check the field names the decisions read. They are
written from the pydantic models in types.py, the one source: tests/unit/api/test_api_views.py fails
when a key here is not a field (by its alias) of the model it mirrors, or a field has no key, so a
renamed field fails the tests, and then type-checking wherever the old name is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict, cast


class NameRef(TypedDict, total=False):
    name: str


class Condition(TypedDict, total=False):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    lastTransitionTime: str
    observedGeneration: int | None


class EnvVar(TypedDict, total=False):
    name: str
    value: str
    containerName: str | None


class LineageEntry(TypedDict, total=False):
    name: str
    createdAt: str | None
    labels: dict[str, str] | None


class ResolvedSettings(TypedDict, total=False):
    warmPoolRef: NameRef | None
    ttl: str | None
    idleTimeout: str | None
    idleAction: str | None
    maxTtl: str | None
    maxIdleTimeout: str | None
    pendingMaxTtl: str | None
    pendingMaxTtlAt: str | None


class SessionSpec(TypedDict, total=False):
    warmPoolRef: NameRef | None
    ttl: str | None
    idleTimeout: str | None
    idleAction: str | None
    env: list[EnvVar] | None
    volumeClaimTemplates: list[dict[str, Any]] | None
    labels: dict[str, str] | None
    podLabels: dict[str, str] | None
    podAnnotations: dict[str, str] | None
    suspend: bool
    forkFrom: NameRef | None


class SessionStatus(TypedDict, total=False):
    phase: str | None
    claimName: str | None
    sandboxName: str | None
    podName: str | None
    podIPs: list[str] | None
    serviceFQDN: str | None
    launchType: str | None
    expiresAt: str | None
    expiryWarnedFor: str | None
    readyAt: str | None
    lastActivityTime: str | None
    busyUntil: str | None
    lastActivityReport: str | None
    idleDeadline: str | None
    observedGeneration: int | None
    hibernation: dict[str, Any] | None
    resolved: ResolvedSettings | None
    lineage: list[LineageEntry] | None
    admittedLabels: dict[str, str] | None
    conditions: list[Condition] | None


class AgentSession(TypedDict, total=False):
    """An AgentSession object as read from the API server or the operator's cache."""

    apiVersion: str
    kind: str
    metadata: dict[str, Any]
    spec: SessionSpec
    status: SessionStatus


MIRRORS: dict[str, str] = {
    "NameRef": "WarmPoolRef",
    "Condition": "Condition",
    "EnvVar": "EnvVar",
    "LineageEntry": "LineageEntry",
    "ResolvedSettings": "ResolvedSettings",
    "SessionSpec": "AgentSessionSpec",
    "SessionStatus": "AgentSessionStatus",
    "AgentSession": "AgentSession",
}
"""Each view and the model of types.py it mirrors (checked by the tests)."""


def status_of(session: Mapping[str, Any] | None) -> SessionStatus:
    """The session's status as a typed view (an empty one before the first write); no copy, no check."""
    return cast(SessionStatus, (session or {}).get("status") or {})


def spec_of(session: Mapping[str, Any] | None) -> SessionSpec:
    """The session's spec as a typed view; no copy, no check."""
    return cast(SessionSpec, (session or {}).get("spec") or {})
