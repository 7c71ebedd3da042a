"""The public API (``agentsession.dev/v1alpha1``) as pydantic models: the CRD schemas are generated from them.

Field names are the API. Descriptions become ``kubectl explain`` text. Every string, list and map is
bounded so the CEL rules stay within the API server's cost budget. Optional fields default to ``None``
(never ``[]``/``{}``) so the generated schema carries no defaults that would hide "unset" from policies.

Over 500 lines on purpose: it is the whole public API, the one file `make crds` (crdgen) generates both
CRDs from; field factories, shared pieces and both kinds stay together so a reviewer sees one API.
"""

from __future__ import annotations

import ipaddress
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from agentsession_api import cel_rules, durations, names, patterns, quantities
from agentsession_api.phases import IdleAction, Phase

LaunchType = Literal["warm", "cold"]
AccessMode = Literal["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]
SelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist"]

MAX_MAP_ENTRIES = 32
MAX_ENV = 64
MAX_ENV_VALUE = 16_384
MAX_VOLUME_CLAIM_TEMPLATES = 8
MAX_ANNOTATION_VALUE = 4_096
MAX_SESSION_LABELS = 64
"""An AgentSession's metadata.labels: the API server bounds each label, not their number, and every replica
of the operator keeps a session's labels in memory (policies and quotas select on them). A CRD cannot
validate metadata: the operator's admission and its reconcile refuse a session over it (issue 49 item 2)."""
MAX_PATTERNS = 64
MAX_CONDITIONS = 16
TIMESTAMP_MAX = 64
MAX_CIDR = 43  # the longest IPv6 CIDR text


def _check_duration(value: str) -> str:
    durations.parse_duration_ns(value)
    return value


def _check_quantity(value: str) -> str:
    quantities.parse_quantity(value)
    return value


def _check_map_size(value: dict[str, str]) -> None:
    if len(value) > MAX_MAP_ENTRIES:
        raise ValueError(f"at most {MAX_MAP_ENTRIES} entries are allowed, got {len(value)}")


def _check_cidr(value: str) -> str:
    network = ipaddress.ip_network(value, strict=True)  # ValueError: not a CIDR, or host bits set
    if str(network) != value:
        raise ValueError(f"{value!r} is not in canonical form ({network})")
    return value


def _check_label_map(value: dict[str, str]) -> dict[str, str]:
    _check_map_size(value)
    for key, item in value.items():
        if not patterns.is_qualified_name(key):
            raise ValueError(f"invalid label key {key!r}: must be {cel_rules.LABEL_KEY_TEXT}")
        if not patterns.is_label_value(item):
            raise ValueError(
                f"invalid label value {item!r} for {key!r}: at most 63 characters, alphanumerics, '-', "
                "'_' and '.', starting and ending with an alphanumeric (or empty)"
            )
    return value


def _check_annotation_map(value: dict[str, str]) -> dict[str, str]:
    _check_map_size(value)
    for key, item in value.items():
        if not patterns.is_qualified_name(key):
            raise ValueError(f"invalid annotation key {key!r}: must be {cel_rules.LABEL_KEY_TEXT}")
        if len(item) > MAX_ANNOTATION_VALUE:
            raise ValueError(f"annotation {key!r} is longer than {MAX_ANNOTATION_VALUE} characters")
    return value


DurationText = Annotated[str, AfterValidator(_check_duration)]
LabelMap = Annotated[dict[str, str], AfterValidator(_check_label_map)]
AnnotationMap = Annotated[dict[str, str], AfterValidator(_check_annotation_map)]
QuantityText = Annotated[str, AfterValidator(_check_quantity)]


# --- Field factories: the same bounded schema wherever a kind of value appears -----------------------
def duration_field(path: str, description: str) -> Any:
    """An optional positive Go-style duration, checked by pattern and CEL at admission."""
    return Field(
        None,
        description=f"{description} A Go-style duration such as 30m, 2h or 1h30m (units h, m, s, ms, us, ns).",
        json_schema_extra={
            # pydantic leaves constraints out of the schema when an AfterValidator follows them: state them here.
            "maxLength": durations.DURATION_MAX_LENGTH,
            "pattern": durations.DURATION_PATTERN,
            "x-kubernetes-validations": [cel_rules.positive_duration(path)],
        },
    )


def quantity_field(description: str, *, required: bool = False) -> Any:
    """A storage size such as 10Gi."""
    return Field(
        ... if required else None,
        description=f"{description}: {quantities.ALLOWED_TEXT}.",
        json_schema_extra={"maxLength": quantities.QUANTITY_MAX_LENGTH, "pattern": quantities.QUANTITY_PATTERN},
    )


def _map_field(path: str, description: str, values: dict[str, Any], extra_rules: tuple[dict[str, Any], ...]) -> Any:
    """An optional map keyed by label/annotation keys (checked by CEL: a schema cannot pattern map keys)."""
    return Field(
        None,
        description=description,
        json_schema_extra={
            "maxProperties": MAX_MAP_ENTRIES,
            "x-kubernetes-validations": [cel_rules.qualified_keys(path), *extra_rules],
            "additionalProperties": {"type": "string", **values},
        },
    )


def label_map_field(path: str, description: str, *extra_rules: dict[str, Any]) -> Any:
    """An optional map of label keys to label values."""
    values = {"maxLength": patterns.LABEL_VALUE_MAX, "pattern": patterns.LABEL_VALUE}
    return _map_field(path, description, values, extra_rules)


def annotation_map_field(path: str, description: str, *extra_rules: dict[str, Any]) -> Any:
    """An optional map of annotation keys to free-form values."""
    return _map_field(path, description, {"maxLength": MAX_ANNOTATION_VALUE}, extra_rules)


def timestamp_field(alias: str, description: str) -> Any:
    """An optional RFC 3339 timestamp written by the operator."""
    return Field(None, alias=alias, description=description, json_schema_extra={"maxLength": TIMESTAMP_MAX})


def observed_generation_field(description: str) -> Any:
    """The metadata.generation something was computed from."""
    return Field(None, alias="observedGeneration", description=description, ge=0, json_schema_extra={"format": "int64"})


class _Spec(BaseModel):
    """Specs refuse unknown fields: a typo must fail loudly, never be dropped."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class _Status(BaseModel):
    """Status is written by the operator; tolerate fields a newer operator version may add."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


# --- Shared pieces ----------------------------------------------------------------------------------
class WarmPoolRef(_Spec):
    """A SandboxWarmPool in the session's namespace; its SandboxTemplate defines the sandbox Pod."""

    name: str = Field(
        description="Name of the SandboxWarmPool.",
        min_length=1,
        max_length=patterns.DNS1123_SUBDOMAIN_MAX,
        pattern=patterns.DNS1123_SUBDOMAIN,
    )


class Condition(_Status):
    """One observation about the session, in the standard Kubernetes condition shape."""

    type: str = Field(
        description="Condition type: Ready, ClaimCreated, PolicyCompliant, NetworkIsolated, Expired or Failed.",
        max_length=316,
    )
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="One CamelCase word saying why.", max_length=1024)
    message: str = Field("", description="What happened and, for failures, what to change.", max_length=32_768)
    last_transition_time: datetime = Field(
        alias="lastTransitionTime",
        description="When status last changed (not reason or message).",
        json_schema_extra={"maxLength": TIMESTAMP_MAX},
    )
    observed_generation: int | None = observed_generation_field("metadata.generation this condition was computed from.")


def conditions_field(description: str) -> Any:
    """A list-map of conditions keyed by type."""
    return Field(
        None,
        description=description,
        max_length=MAX_CONDITIONS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


# --- AgentSession -----------------------------------------------------------------------------------
class EnvVar(_Spec):
    """An environment variable injected into the sandbox Pod (forces a cold start)."""

    name: str = Field(
        description="Variable name (Kubernetes rule: letters, digits, '-', '_', '.', not starting with a digit).",
        min_length=1,
        max_length=patterns.ENV_NAME_MAX,
        pattern=patterns.ENV_NAME,
    )
    value: str = Field(description="Variable value.", max_length=MAX_ENV_VALUE)
    container_name: str | None = Field(
        None,
        alias="containerName",
        description="Container to inject into; the template's first container when unset.",
        max_length=patterns.DNS1123_LABEL_MAX,
        pattern=patterns.DNS1123_LABEL,
    )


class VolumeClaimTemplateMetadata(_Spec):
    """Metadata of a PersistentVolumeClaim; the PVC is named <name>-<sandbox name>."""

    name: str = Field(
        description="Volume name, also the Pod volume name (DNS-1123 label).",
        min_length=1,
        max_length=patterns.DNS1123_LABEL_MAX,
        pattern=patterns.DNS1123_LABEL,
    )
    labels: LabelMap | None = label_map_field(
        "spec.volumeClaimTemplates[].metadata.labels", "Labels for the PersistentVolumeClaim."
    )
    annotations: AnnotationMap | None = annotation_map_field(
        "spec.volumeClaimTemplates[].metadata.annotations", "Annotations for the PersistentVolumeClaim."
    )


class StorageRequests(_Spec):
    """Requested resources of a volume."""

    storage: QuantityText = quantity_field("Requested size", required=True)


class VolumeResources(_Spec):
    """Resources of a volume."""

    requests: StorageRequests = Field(description="Minimum resources the volume needs.")


class VolumeClaimTemplateSpec(_Spec):
    """The subset of PersistentVolumeClaimSpec a session may set."""

    # agent-sandbox copies this into a PersistentVolumeClaim, which needs at least one access mode: left
    # out, the claim stuck in ReconcilerError until the ready timeout. The API server fills the default.
    access_modes: list[AccessMode] = Field(
        default=["ReadWriteOnce"],
        alias="accessModes",
        description="Access modes; [ReadWriteOnce] when unset.",
        min_length=1,
        max_length=4,
    )
    resources: VolumeResources = Field(description="Size of the volume.")
    storage_class_name: str | None = Field(
        None,
        alias="storageClassName",
        description="StorageClass; the cluster default when unset.",
        max_length=patterns.DNS1123_SUBDOMAIN_MAX,
        pattern=patterns.DNS1123_SUBDOMAIN,
    )
    volume_mode: Literal["Filesystem", "Block"] | None = Field(
        None, alias="volumeMode", description="Filesystem (default) or Block."
    )


class VolumeClaimTemplate(_Spec):
    """A PersistentVolumeClaim created with the sandbox and kept while the session lives (survives Suspend)."""

    metadata: VolumeClaimTemplateMetadata = Field(description="Name, labels and annotations of the claim.")
    spec: VolumeClaimTemplateSpec = Field(description="Access modes, size and storage class.")


class ForkFrom(_Spec):
    """The session whose volumes a fork starts from: always in the fork's own namespace (there is no
    namespace field, so a fork of another namespace's session cannot be written)."""

    name: str = Field(
        description=(
            "Name of the source AgentSession, in this namespace. It must be Ready or Suspended and have volumes; "
            "each of its PersistentVolumeClaims is copied by the storage layer (a dataSource clone), never "
            "through the sandbox. A running source is copied crash-consistently (as if its Pod had lost power: "
            "files closed before the fork are complete, writes in flight may be partial); suspend the source "
            "first (the client's fork(suspend_source=True), kubectl agentsession fork --suspend-source) for an "
            "exact copy. Immutable."
        ),
        min_length=1,
        max_length=patterns.DNS1123_SUBDOMAIN_MAX,
        pattern=patterns.DNS1123_SUBDOMAIN,
    )


class AgentSessionSpec(_Spec):
    """Desired state of an AgentSession: which pool to draw a sandbox from and how long it may live."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rules.immutable("warmPoolRef", "delete and recreate the AgentSession to use another pool"),
                cel_rules.immutable("env", "delete and recreate the AgentSession to change the environment"),
                cel_rules.immutable(
                    "volumeClaimTemplates", "delete and recreate the AgentSession to change its volumes"
                ),
                cel_rules.immutable("forkFrom", "a session is a fork from its creation or never"),
                cel_rules.exclusive(
                    "forkFrom",
                    "volumeClaimTemplates",
                    "a fork's volumes are copies of the source's: remove spec.volumeClaimTemplates",
                ),
            ]
        }
    )

    warm_pool_ref: WarmPoolRef | None = Field(
        None,
        alias="warmPoolRef",
        description=(
            "SandboxWarmPool to claim a sandbox from. Optional when an AgentSessionPolicy gives a default. Immutable."
        ),
    )
    ttl: DurationText | None = duration_field(
        "spec.ttl", "Lifetime counted from metadata.creationTimestamp; the session expires after it."
    )
    idle_timeout: DurationText | None = duration_field(
        "spec.idleTimeout",
        "How long the sandbox may go without client activity (annotation agentsession.dev/activity) "
        "before spec.idleAction applies.",
    )
    idle_action: IdleAction | None = Field(
        None,
        alias="idleAction",
        description=(
            "What happens at the idle timeout: Delete (end the session, phase Expired), Suspend (stop the "
            "Pod, keep volumes; activity resumes it) or Hibernate (Suspend keeping the sandbox's memory; "
            "until the operator can checkpoint it suspends as Suspend, and condition Hibernated says so). "
            "Delete when neither the session nor a policy sets it."
        ),
    )
    env: list[EnvVar] | None = Field(
        None,
        description="Environment variables for the sandbox (forces a cold start). Names are unique. Immutable.",
        max_length=MAX_ENV,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    volume_claim_templates: list[VolumeClaimTemplate] | None = Field(
        None,
        alias="volumeClaimTemplates",
        description="Persistent volumes for the sandbox (forces a cold start). Immutable.",
        max_length=MAX_VOLUME_CLAIM_TEMPLATES,
        json_schema_extra={
            "x-kubernetes-validations": [cel_rules.unique_by("spec.volumeClaimTemplates", "metadata.name")]
        },
    )
    labels: LabelMap | None = label_map_field(
        "spec.labels",
        "Extra labels for the SandboxClaim (the session's own metadata.labels are not copied).",
        cel_rules.unreserved_label_keys("spec.labels"),
    )
    pod_labels: LabelMap | None = label_map_field(
        "spec.podLabels",
        "Labels for the sandbox Pod. agent-sandbox only accepts keys under its allowed domains "
        "(default sandbox.users.io and subdomains).",
        cel_rules.prefixed_pod_label_keys("spec.podLabels"),
    )
    pod_annotations: AnnotationMap | None = annotation_map_field(
        "spec.podAnnotations",
        "Annotations for the sandbox Pod (not in the kubernetes.io, k8s.io or agents.x-k8s.io domains).",
        cel_rules.unrestricted_annotation_keys("spec.podAnnotations"),
        cel_rules.operator_only_annotation_keys("spec.podAnnotations"),
    )
    suspend: bool = Field(False, description="True stops the sandbox Pod and keeps its volumes; false runs it again.")
    fork_from: ForkFrom | None = Field(
        None,
        alias="forkFrom",
        description=(
            "Start as a fork of another session of this namespace: the new sandbox gets copies of the source's "
            "volumes (same names, sizes and storage classes). spec.warmPoolRef defaults to the source's warm pool. "
            "Policies apply as to any new session, and so does every policy that selects the source or the "
            "source's own lineage (recorded in status.lineage, whatever labels the fork carries; their maxTtl "
            "counts from the source's creation); spec.limits.allowForks=false in any of them refuses it. Immutable; "
            "excludes spec.volumeClaimTemplates."
        ),
    )


class ResolvedSettings(_Status):
    """The settings in force after AgentSessionPolicy defaults and limits."""

    warm_pool_ref: WarmPoolRef | None = Field(None, alias="warmPoolRef", description="Warm pool in use.")
    ttl: str | None = Field(None, description="Lifetime in force.", max_length=durations.DURATION_MAX_LENGTH)
    idle_timeout: str | None = Field(
        None, alias="idleTimeout", description="Idle timeout in force.", max_length=durations.DURATION_MAX_LENGTH
    )
    idle_action: IdleAction | None = Field(None, alias="idleAction", description="Idle action in force.")
    max_ttl: str | None = Field(
        None,
        alias="maxTtl",
        description="Policy maximum TTL in force; once the session runs, it never loosens (removing a label "
        "that selected a policy lifts nothing).",
        max_length=durations.DURATION_MAX_LENGTH,
    )
    max_idle_timeout: str | None = Field(
        None,
        alias="maxIdleTimeout",
        description="Policy maximum idle timeout in force; never loosens once the session runs.",
        max_length=durations.DURATION_MAX_LENGTH,
    )
    pending_max_ttl: str | None = Field(
        None,
        alias="pendingMaxTtl",
        description="A lowered policy maxTtl waiting for its grace period (spec.limits.maxTtlGracePeriod) "
        "before it applies to this running session.",
        max_length=durations.DURATION_MAX_LENGTH,
    )
    pending_max_ttl_at: datetime | None = timestamp_field(
        "pendingMaxTtlAt", "When pendingMaxTtl applies (the session expires then at the latest, if over it)."
    )


class LineageEntry(_Status):
    """A session a fork's data came from, as it was when forked: every AgentSessionPolicy that selects
    these labels holds for the fork too, and a maxTtl of such a policy counts from this createdAt."""

    name: str = Field(description="The ancestor AgentSession (it may be gone since).", max_length=253)
    created_at: datetime | None = timestamp_field("createdAt", "The ancestor's metadata.creationTimestamp.")
    labels: dict[str, str] | None = Field(
        None,
        description="The ancestor's metadata.labels when it was forked.",
        json_schema_extra={
            "maxProperties": names.MAX_LINEAGE_LABELS,
            "additionalProperties": {"type": "string", "maxLength": patterns.LABEL_VALUE_MAX},
        },
    )


class HibernationStatus(_Status):
    """The last idle Hibernate (issue 33): the checkpoint kept on the sandbox's node, or why there is none."""

    hibernated: bool = Field(description="True: a checkpoint is kept and the next use restores from it.")
    reason: str = Field(description="Checkpointed, or why the session suspended as Suspend.", max_length=1024)
    message: str = Field("", description="What happened.", max_length=4096)
    checkpoint: str | None = Field(
        None, description="The checkpoint's name (under the node's checkpoint root, in this namespace).", max_length=63
    )
    size_bytes: int | None = Field(None, alias="sizeBytes", description="The checkpoint's size.", ge=0)
    taken_at: datetime | None = timestamp_field("takenAt", "When the checkpoint was taken (its age).")


class AgentSessionStatus(_Status):
    """Observed state of an AgentSession, written by the operator only."""

    phase: Phase | None = Field(
        None,
        description=(
            "Pending, Provisioning, Ready, Suspended, Expired (planned end: TTL or idle timeout), Failed (an "
            "error to fix, see conditions) or Terminating. Unset on a new session until it is Ready, Pending or "
            "Failed, or has been provisioning for 15 s (one status write for a session Ready sooner)."
        ),
    )
    claim_name: str | None = Field(
        None, alias="claimName", description="The SandboxClaim this session owns.", max_length=63
    )
    sandbox_name: str | None = Field(
        None, alias="sandboxName", description="The Sandbox bound to the claim.", max_length=253
    )
    pod_name: str | None = Field(
        None, alias="podName", description="The sandbox Pod (same as the Sandbox).", max_length=253
    )
    pod_ips: list[Annotated[str, Field(max_length=64)]] | None = Field(
        None, alias="podIPs", description="IP addresses of the sandbox Pod.", max_length=8
    )
    service_fqdn: str | None = Field(
        None,
        alias="serviceFQDN",
        description="In-cluster DNS name of the sandbox Service, when the template asks for one.",
        max_length=512,
    )
    launch_type: LaunchType | None = Field(
        None, alias="launchType", description="warm (adopted from the pool) or cold (created for this session)."
    )
    expires_at: datetime | None = timestamp_field("expiresAt", "When the TTL ends the session.")
    expiry_warned_for: datetime | None = timestamp_field(
        "expiryWarnedFor", "The expiresAt an ExpiringSoon Warning Event was posted for (one per expiry time)."
    )
    ready_at: datetime | None = timestamp_field("readyAt", "When the session first became Ready.")
    last_activity_time: datetime | None = timestamp_field(
        "lastActivityTime", "Last client activity seen by the operator, or when the sandbox (re)became Ready if later."
    )
    busy_until: datetime | None = timestamp_field(
        "busyUntil", "Until when the client said it is busy (the idle clock waits)."
    )
    last_activity_report: str | None = Field(
        None,
        alias="lastActivityReport",
        description="The client's activity annotation as last observed (so a restart does not count it again).",
        max_length=256,
    )
    idle_deadline: datetime | None = timestamp_field(
        "idleDeadline", "When spec.idleAction applies unless there is activity first."
    )
    observed_generation: int | None = observed_generation_field("metadata.generation the status reflects.")
    hibernation: HibernationStatus | None = Field(
        None, description="idleAction Hibernate: the checkpoint kept for the next use, or why none was."
    )
    resolved: ResolvedSettings | None = Field(None, description="Settings in force after policy defaults.")
    lineage: list[LineageEntry] | None = Field(
        None,
        description=(
            "For a fork: its source, and the source's own lineage (a fork of a fork), recorded by the operator "
            "before the fork's claim is created; identical label sets are kept once, with the oldest createdAt. "
            "Policies selecting any of these labels judge the fork as if they selected it, so relabelling the "
            "fork drops none of them."
        ),
        max_length=names.MAX_LINEAGE,
    )
    admitted_labels: dict[str, str] | None = Field(
        None,
        alias="admittedLabels",
        description=(
            "metadata.labels as the operator first judged the session, recorded at its first pass and never "
            "changed: policies selecting them keep judging it, so a relabel that got past admission (no "
            "webhook answering) lifts no policy and widens no egress."
        ),
        json_schema_extra={
            "maxProperties": MAX_SESSION_LABELS,
            "additionalProperties": {"type": "string", "maxLength": patterns.LABEL_VALUE_MAX},
        },
    )
    conditions: list[Condition] | None = conditions_field(
        "Ready, ClaimCreated, PolicyCompliant, NetworkIsolated, Expired and Failed."
    )


class _Object(BaseModel):
    """The envelope of an object of this API (kind, spec and status come with each kind)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    api_version: str = Field(names.API_VERSION, alias="apiVersion")
    metadata: dict[str, Any] = Field(default_factory=dict)


class AgentSession(_Object):
    """A sandbox session for an agent: one SandboxClaim with a TTL, an idle timeout and policy checks."""

    kind: str = Field(names.SESSION_KIND)
    spec: AgentSessionSpec = Field(default_factory=lambda: AgentSessionSpec.model_validate({}))
    status: AgentSessionStatus | None = None


# --- AgentSessionPolicy -----------------------------------------------------------------------------
class SelectorRequirement(_Spec):
    """One label requirement (LabelSelector semantics)."""

    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [cel_rules.selector_values("spec.selector.matchExpressions[]")]}
    )

    key: str = Field(
        description="Label key.",
        min_length=1,
        max_length=patterns.QUALIFIED_NAME_MAX,
        pattern=patterns.QUALIFIED_NAME,
    )
    operator: SelectorOperator = Field(description="In, NotIn, Exists or DoesNotExist.")
    values: list[Annotated[str, Field(max_length=patterns.LABEL_VALUE_MAX)]] | None = Field(
        None, description="Values for In and NotIn; empty for Exists and DoesNotExist.", max_length=MAX_PATTERNS
    )


class SessionSelector(_Spec):
    """Which AgentSessions (by their metadata.labels) a policy applies to; empty selects all in the namespace."""

    match_labels: LabelMap | None = label_map_field(
        "spec.selector.matchLabels", "Labels a session must carry, all of them."
    )
    match_expressions: list[SelectorRequirement] | None = Field(
        None,
        alias="matchExpressions",
        description="Requirements a session must meet, all of them.",
        max_length=16,
    )


class PolicyDefaults(_Spec):
    """Values used when a session leaves the field unset."""

    warm_pool_ref: WarmPoolRef | None = Field(None, alias="warmPoolRef", description="Default warm pool.")
    ttl: DurationText | None = duration_field("spec.defaults.ttl", "Default lifetime.")
    idle_timeout: DurationText | None = duration_field("spec.defaults.idleTimeout", "Default idle timeout.")
    idle_action: IdleAction | None = Field(None, alias="idleAction", description="Default idle action.")
    labels: LabelMap | None = label_map_field(
        "spec.defaults.labels",
        "Labels added to the SandboxClaim unless the session sets the same key.",
        cel_rules.unreserved_label_keys("spec.defaults.labels"),
    )
    pod_labels: LabelMap | None = label_map_field(
        "spec.defaults.podLabels",
        "Labels added to the Pod unless the session sets the same key.",
        cel_rules.prefixed_pod_label_keys("spec.defaults.podLabels"),
    )


LabelPrefix = Annotated[str, Field(min_length=1, max_length=patterns.DNS1123_SUBDOMAIN_MAX + 1)]
LabelKey = Annotated[str, Field(max_length=patterns.QUALIFIED_NAME_MAX, pattern=patterns.QUALIFIED_NAME)]
EnvGlob = Annotated[str, Field(min_length=1, max_length=patterns.ENV_NAME_MAX, pattern=patterns.ENV_GLOB)]


class EnvRules(_Spec):
    """Name patterns for spec.env; '*' matches any run of characters and '?' one character."""

    allow: list[EnvGlob] | None = Field(
        None, description="When set, every variable name must match one of these.", max_length=MAX_PATTERNS
    )
    deny: list[EnvGlob] | None = Field(
        None, description="No variable name may match any of these (e.g. AWS_*).", max_length=MAX_PATTERNS
    )


KeyGlob = Annotated[str, Field(min_length=1, max_length=patterns.QUALIFIED_NAME_MAX)]


class KeyRules(_Spec):
    """Patterns for annotation keys; '*' matches any run of characters (including '/' and '.'), '?' one."""

    allow: list[KeyGlob] | None = Field(
        None, description="When set, every key must match one of these.", max_length=MAX_PATTERNS
    )
    deny: list[KeyGlob] | None = Field(
        None, description="No key may match any of these (e.g. sidecar.istio.io/*).", max_length=MAX_PATTERNS
    )


class PolicyLimits(_Spec):
    """Upper bounds; a session over a bound is refused before any sandbox is claimed."""

    max_ttl: DurationText | None = duration_field("spec.limits.maxTtl", "Longest allowed spec.ttl.")
    max_ttl_grace_period: DurationText | None = duration_field(
        "spec.limits.maxTtlGracePeriod",
        "When maxTtl is lowered, how long a running session keeps its former expiry before the new limit "
        "applies to it (a Warning Event says when, at once). Default 1h; the smallest of the policies that "
        "set one wins.",
    )
    max_idle_timeout: DurationText | None = duration_field(
        "spec.limits.maxIdleTimeout", "Longest allowed spec.idleTimeout."
    )
    allowed_warm_pools: (
        list[Annotated[str, Field(max_length=patterns.DNS1123_SUBDOMAIN_MAX, pattern=patterns.DNS1123_SUBDOMAIN)]]
        | None
    ) = Field(None, alias="allowedWarmPools", description="Warm pools sessions may use.", max_length=MAX_PATTERNS)
    max_storage: QuantityText | None = quantity_field("Largest total of spec.volumeClaimTemplates requests")
    env: EnvRules | None = Field(None, description="Rules for spec.env names.")
    pod_annotations: KeyRules | None = Field(
        None,
        alias="podAnnotations",
        description="Rules for spec.podAnnotations keys (e.g. deny sidecar.istio.io/* so no session opts out of "
        "the mesh).",
    )
    allowed_storage_classes: (
        list[Annotated[str, Field(max_length=patterns.DNS1123_SUBDOMAIN_MAX, pattern=patterns.DNS1123_SUBDOMAIN)]]
        | None
    ) = Field(
        None,
        alias="allowedStorageClasses",
        description="When set, every spec.volumeClaimTemplates[] must name one of these storageClassName values "
        "(an unset class, which means the cluster default, is refused).",
        max_length=MAX_PATTERNS,
    )
    volume_annotations: KeyRules | None = Field(
        None,
        alias="volumeAnnotations",
        description="Rules for the keys of spec.volumeClaimTemplates[].metadata.annotations.",
    )
    allow_forks: bool | None = Field(
        None,
        alias="allowForks",
        description="false refuses sessions with spec.forkFrom (a fork copies another session's volumes), and forks "
        "of the sessions this policy selects, whatever labels the fork carries. "
        "Allowed when unset; when several policies apply, any false refuses.",
    )
    allow_hibernate: bool | None = Field(
        None,
        alias="allowHibernate",
        description="false refuses sessions with spec.idleAction Hibernate (a checkpoint of the sandbox's memory, "
        "kept on its node until the wake); a session that has it anyway (a policy default, or one stored before "
        "the policy) suspends as Suspend, condition Hibernated False with reason HibernateForbidden. "
        "Allowed when unset; when several policies apply, any false forbids.",
    )
    max_checkpoint_size: QuantityText | None = quantity_field(
        "Largest Hibernate checkpoint image kept (a larger one is deleted and the session suspends as Suspend, "
        "reason CheckpointTooLarge); the smallest of the policies and the operator's --max-checkpoint-size wins"
    )
    max_hibernated_size: QuantityText | None = quantity_field(
        "Most checkpoint bytes the namespace's hibernated sessions keep together on nodes, checked when a "
        "session this policy selects hibernates: once they reach it, or when its checkpoint would pass it "
        "(then deleted), the session suspends as Suspend, reason HibernatedSizeExceeded. The smallest of the "
        "policies wins."
    )


class LabelRules(_Spec):
    """Rules for session labels."""

    required: list[LabelKey] | None = Field(
        None, description="Keys every session's metadata.labels must carry.", max_length=MAX_MAP_ENTRIES
    )
    allowed_prefixes: list[LabelPrefix] | None = Field(
        None,
        description="When set, every key of spec.labels and spec.podLabels must start with one of these "
        "(e.g. team.example.com/).",
        max_length=MAX_MAP_ENTRIES,
    )
    values: dict[str, Annotated[str, Field(max_length=1024)]] | None = Field(
        None,
        description="Label key to a regular expression its value must match in full, wherever the label is set "
        "(metadata.labels, spec.labels, spec.podLabels).",
        max_length=MAX_MAP_ENTRIES,
        json_schema_extra={"x-kubernetes-validations": [cel_rules.qualified_keys("spec.labels.values")]},
    )


class SessionLimit(_Spec):
    """At most ``max`` unfinished sessions per value of label ``key`` (or, with ``countAcrossValues``, carrying
    the key at all). Tenants choose label values: per value, ``team=a1``, ``team=a2``, ... each get ``max``.
    A session without the label is never counted (``maxSessionsPerNamespace`` caps those)."""

    key: str = Field(
        description="Session label to count by, e.g. team.",
        min_length=1,
        max_length=patterns.QUALIFIED_NAME_MAX,
        pattern=patterns.QUALIFIED_NAME,
    )
    max: int = Field(description="Largest number of unfinished sessions per label value.", ge=1, le=100_000)
    count_across_values: bool = Field(
        False,
        description=(
            "Count every session carrying the key in one group, whatever its value: at most max in all "
            "(team=a1 and team=a2 share the places). False (the default): max per value, which a tenant "
            "choosing new values passes."
        ),
    )


class CleanupRules(_Spec):
    """What the operator deletes by itself."""

    delete_finished_after: DurationText | None = duration_field(
        "spec.cleanup.deleteFinishedAfter", "Delete Expired and Failed sessions this long after they finished."
    )
    max_sessions_per_label: SessionLimit | None = Field(
        None, alias="maxSessionsPerLabel", description="Cap on unfinished sessions per label value."
    )
    max_sessions_per_namespace: int | None = Field(
        None,
        alias="maxSessionsPerNamespace",
        description=(
            "Cap on unfinished sessions in this policy's namespace, counted over and applied to every "
            "AgentSession there whatever the policy's selector (a label cannot dodge it); the smallest of "
            "the namespace's policies wins."
        ),
        ge=1,
        le=1_000_000,
    )


CidrText = Annotated[
    str,
    AfterValidator(_check_cidr),
    Field(
        max_length=MAX_CIDR,
        json_schema_extra={
            "maxLength": MAX_CIDR,
            "x-kubernetes-validations": [cel_rules.cidr("spec.egress.allowCIDRs[]")],
        },
    ),
]


class EgressPort(_Spec):
    """A destination port (and protocol) a sandbox may connect to."""

    port: int = Field(description="Port number.", ge=1, le=65535)
    protocol: Literal["TCP", "UDP", "SCTP"] | None = Field(None, description="TCP (default), UDP or SCTP.")


class EgressRules(_Spec):
    """Where the sandbox Pod of a selected session may open connections (its per-session NetworkPolicy).

    Nothing is allowed unless listed. Whatever is listed, the cloud metadata address 169.254.169.254 stays
    closed, and the cluster's own pod and Service ranges (the operator's --cluster-cidr) are cut out of
    any wider CIDR: only a CIDR inside them opens part of the cluster network.
    """

    allow_cidrs: list[CidrText] | None = Field(
        None,
        alias="allowCIDRs",
        description="Destination CIDRs the sandbox may connect to (none when unset).",
        max_length=MAX_PATTERNS,
    )
    ports: list[EgressPort] | None = Field(
        None, description="Ports allowed to allowCIDRs; every port when unset.", max_length=MAX_PATTERNS
    )
    dns: bool | None = Field(
        None,
        description="True lets the sandbox query the cluster DNS (kube-dns pods in kube-system, port 53). Off "
        "unless a policy says true and none says false.",
    )


class AgentSessionPolicySpec(_Spec):
    """Defaults, limits, label rules and cleanup for the AgentSessions it selects."""

    selector: SessionSelector | None = Field(None, description="Sessions this policy applies to; empty: all.")
    defaults: PolicyDefaults | None = Field(None, description="Values for fields a session leaves unset.")
    limits: PolicyLimits | None = Field(None, description="Bounds sessions must stay within.")
    labels: LabelRules | None = Field(None, description="Rules for session labels.")
    cleanup: CleanupRules | None = Field(None, description="Automatic deletion of finished sessions.")
    egress: EgressRules | None = Field(
        None,
        description="Where sandboxes may connect to. With several policies, only what every policy that sets "
        "egress allows. No policy with egress: no egress at all.",
    )


class AgentSessionPolicyStatus(_Status):
    """Observed state of an AgentSessionPolicy."""

    observed_generation: int | None = observed_generation_field("metadata.generation the status reflects.")
    matched_sessions: int | None = Field(
        None, alias="matchedSessions", description="Sessions this policy currently selects.", ge=0
    )
    conditions: list[Condition] | None = conditions_field("Valid (the policy parsed) and others.")


class AgentSessionPolicy(_Object):
    """Namespace rules for AgentSessions: defaults, limits, label rules and cleanup."""

    kind: str = Field(names.POLICY_KIND)
    spec: AgentSessionPolicySpec = Field(default_factory=lambda: AgentSessionPolicySpec.model_validate({}))
    status: AgentSessionPolicyStatus | None = None
