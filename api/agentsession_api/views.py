"""Typed views of an AgentSession as the API server sends it (JSON: camelCase keys, strings for times).

The operator decides over plain dicts (building the pydantic models cost CPU at every pass); these
TypedDicts cost nothing at run time and let mypy check the field names the decisions read. They are
written from the pydantic models in types.py, the one source: tests/unit/api/test_api_views.py fails
when a key here is not a field (by its alias) of the model it mirrors, or a field has no key, so a
renamed field fails the tests, and then type-checking wherever the old name is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, TypedDict, cast

from agentsession_api import phases
from agentsession_api.timestamps import parse_time
from agentsession_api.views_generated import (
    AgentSessionPolicySpecView,
    AgentSessionSpecView,
    ConditionView,
    LineageEntryView,
    ResolvedSettingsView,
)


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


# ---- accessors over whole objects (no copies): what the decisions read, named once -------------------------


def _condition(conditions: Any, type_: str) -> ConditionView:
    for condition in conditions or ():
        if isinstance(condition, Mapping) and condition.get("type") == type_:
            return ConditionView(condition)
    return ConditionView(None)


class Obj:
    """Any object's body as the API server sends it (a dict), read through named accessors; a missing part
    reads as empty (None, {} or ""), never raises. Holds the body itself: nothing is copied or checked."""

    __slots__ = ("body",)

    def __init__(self, body: Mapping[str, Any] | None) -> None:
        self.body: Mapping[str, Any] = body or {}

    @property
    def meta(self) -> Mapping[str, Any]:
        return self.body.get("metadata") or {}

    @property
    def name(self) -> str:
        return str(self.meta.get("name") or "")

    @property
    def namespace(self) -> str:
        return str(self.meta.get("namespace") or "")

    @property
    def uid(self) -> str:
        return str(self.meta.get("uid") or "")

    @property
    def generation(self) -> int | None:
        value = self.meta.get("generation")
        return value if isinstance(value, int) else None

    @property
    def labels(self) -> Mapping[str, str]:
        return self.meta.get("labels") or {}

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.meta.get("annotations") or {}

    @property
    def created(self) -> str:
        return str(self.meta.get("creationTimestamp") or "")

    @property
    def creation_time(self) -> datetime | None:
        return parse_time(self.meta.get("creationTimestamp"))

    @property
    def deleting(self) -> bool:
        return bool(self.meta.get("deletionTimestamp"))

    @property
    def spec(self) -> Mapping[str, Any]:
        return self.body.get("spec") or {}

    @property
    def status(self) -> Mapping[str, Any]:
        return self.body.get("status") or {}

    @property
    def conditions(self) -> list[Mapping[str, Any]]:
        return list(self.status.get("conditions") or [])

    def condition(self, type_: str) -> ConditionView:
        """The status condition of ``type_`` (an empty view when there is none)."""
        return _condition(self.status.get("conditions"), type_)


class _StatusFields:
    """An AgentSession's status fields, read from ``_fields()`` (the whole session's status, or a status alone)."""

    __slots__ = ()

    def _fields(self) -> Mapping[str, Any]:
        raise NotImplementedError

    @property
    def phase(self) -> str | None:
        return self._fields().get("phase")

    @property
    def resolved(self) -> Mapping[str, Any]:
        return self._fields().get("resolved") or {}

    @property
    def resolved_view(self) -> ResolvedSettingsView:
        """status.resolved field by field (views_generated)."""
        return ResolvedSettingsView(self._fields().get("resolved"))

    @property
    def claim_created(self) -> bool:
        """Condition ClaimCreated is True: the session's sandbox was asked for (its maxima only tighten since)."""
        return self.condition(phases.COND_CLAIM_CREATED).status == "True"

    @property
    def hibernation(self) -> Mapping[str, Any]:
        return self._fields().get("hibernation") or {}

    @property
    def lineage(self) -> list[LineageEntryView]:
        return [LineageEntryView(entry) for entry in self._fields().get("lineage") or []]

    @property
    def pod_name(self) -> str | None:
        return self._fields().get("podName") or None

    @property
    def admitted_labels(self) -> Any:
        """status.admittedLabels as stored (a mapping once recorded; None before)."""
        return self._fields().get("admittedLabels")

    @property
    def ready_at(self) -> str | None:
        return self._fields().get("readyAt") or None

    @property
    def last_activity_time(self) -> str | None:
        return self._fields().get("lastActivityTime") or None

    @property
    def busy_until(self) -> str | None:
        return self._fields().get("busyUntil") or None

    @property
    def expires_at(self) -> str | None:
        return self._fields().get("expiresAt") or None

    @property
    def expiry_warned_for(self) -> str | None:
        return self._fields().get("expiryWarnedFor") or None

    @property
    def idle_deadline(self) -> str | None:
        return self._fields().get("idleDeadline") or None

    # The same times, parsed (None when absent or not RFC 3339).
    @property
    def expiry_time(self) -> datetime | None:
        return parse_time(self._fields().get("expiresAt"))

    @property
    def idle_deadline_time(self) -> datetime | None:
        return parse_time(self._fields().get("idleDeadline"))

    @property
    def expiry_warned_time(self) -> datetime | None:
        return parse_time(self._fields().get("expiryWarnedFor"))

    @property
    def last_activity(self) -> datetime | None:
        return parse_time(self._fields().get("lastActivityTime"))

    @property
    def busy_until_time(self) -> datetime | None:
        return parse_time(self._fields().get("busyUntil"))

    def condition(self, type_: str) -> ConditionView:
        """The condition of ``type_`` (an empty view when there is none)."""
        return _condition(self._fields().get("conditions"), type_)


class Status(_StatusFields):
    """An AgentSession's status alone (a pass's status before and after, a patch)."""

    __slots__ = ("fields",)

    def __init__(self, fields: Mapping[str, Any] | None) -> None:
        self.fields: Mapping[str, Any] = fields or {}

    def _fields(self) -> Mapping[str, Any]:
        return self.fields


class Session(_StatusFields, Obj):
    """An AgentSession."""

    __slots__ = ()

    def _fields(self) -> Mapping[str, Any]:
        return self.status

    @property
    def spec_view(self) -> AgentSessionSpecView:
        """The spec, field by field (views_generated, from the pydantic model)."""
        return AgentSessionSpecView(self.spec)

    @property
    def suspend(self) -> bool:
        return bool(self.spec.get("suspend"))

    @property
    def fork_from(self) -> str | None:
        """The source session's name (spec.forkFrom), None when it is no fork."""
        return (self.spec.get("forkFrom") or {}).get("name") or None

    @property
    def warm_pool(self) -> str | None:
        """spec.warmPoolRef's name (None: the policies' default)."""
        return (self.spec.get("warmPoolRef") or {}).get("name") or None

    @property
    def resolved_pool(self) -> str | None:
        """The pool the session was resolved to (status.resolved), else the one its spec names."""
        return (self.resolved.get("warmPoolRef") or {}).get("name") or self.warm_pool


class Claim(Obj):
    """A SandboxClaim (agent-sandbox)."""

    __slots__ = ()

    @property
    def bound(self) -> Mapping[str, Any]:
        """What agent-sandbox says of the Sandbox it is bound to (status.sandbox: name, podIPs, serviceFQDN)."""
        return self.status.get("sandbox") or {}

    @property
    def bound_sandbox(self) -> str | None:
        """The Sandbox it is bound to (status.sandbox.name)."""
        return self.bound.get("name") or None

    @property
    def warm_pool(self) -> str | None:
        return (self.spec.get("warmPoolRef") or {}).get("name") or None

    @property
    def shutdown_time(self) -> str | None:
        """spec.lifecycle.shutdownTime: when agent-sandbox ends the Sandbox."""
        return (self.spec.get("lifecycle") or {}).get("shutdownTime") or None

    @property
    def pod_annotations(self) -> Mapping[str, str]:
        """spec.additionalPodMetadata.annotations: what the claim adds to its Sandbox's pod."""
        return (self.spec.get("additionalPodMetadata") or {}).get("annotations") or {}


class Sandbox(Obj):
    """A Sandbox (agent-sandbox)."""

    __slots__ = ()

    @property
    def operating_mode(self) -> str | None:
        """spec.operatingMode (None: unset, which agent-sandbox runs)."""
        return self.spec.get("operatingMode") or None

    @property
    def pod_template(self) -> Obj:
        """spec.podTemplate (its metadata and spec)."""
        return Obj(self.spec.get("podTemplate"))

    @property
    def node_name(self) -> str:
        return str(self.status.get("nodeName") or "")

    @property
    def pod_ips(self) -> list[str]:
        return list(self.status.get("podIPs") or [])

    @property
    def service_fqdn(self) -> str | None:
        return self.status.get("serviceFQDN") or None

    @property
    def volume_claim_templates(self) -> list[Mapping[str, Any]]:
        return list(self.spec.get("volumeClaimTemplates") or [])


class Policy(Obj):
    """An AgentSessionPolicy."""

    __slots__ = ()

    @property
    def spec_view(self) -> AgentSessionPolicySpecView:
        """The spec, field by field (views_generated, from the pydantic model)."""
        return AgentSessionPolicySpecView(self.spec)

    @property
    def cleanup(self) -> Mapping[str, Any]:
        return self.spec.get("cleanup") or {}

    @property
    def selector(self) -> Mapping[str, Any] | None:
        """spec.selector as stored (None: every session of its namespace)."""
        return self.spec.get("selector")


class Pod(Obj):
    """A Pod (core/v1): what the operator reads of one."""

    __slots__ = ()

    @property
    def node_name(self) -> str:
        return str(self.spec.get("nodeName") or "")

    @property
    def service_account(self) -> str:
        return str(self.spec.get("serviceAccountName") or "")


class CertificateRequest(Obj):
    """A CertificateSigningRequest (certificates.k8s.io/v1): who asked (the API server wrote it), for which
    signer and usages, and what became of it."""

    __slots__ = ()

    @property
    def signer(self) -> str:
        return str(self.spec.get("signerName") or "")

    @property
    def username(self) -> str:
        return str(self.spec.get("username") or "")

    @property
    def usages(self) -> set[str]:
        return {str(u) for u in self.spec.get("usages") or []}

    def extra(self, key: str) -> str:
        """The one value of ``spec.extra[key]`` (a pod's name, UID or node), "" when absent or not exactly one."""
        values = (self.spec.get("extra") or {}).get(key) or []
        return str(values[0]) if isinstance(values, list) and len(values) == 1 else ""

    @property
    def certificate(self) -> str:
        return str(self.status.get("certificate") or "")

    @property
    def condition_types(self) -> set[str]:
        return {str(c.get("type")) for c in self.conditions if isinstance(c, Mapping)}
