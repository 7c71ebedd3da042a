"""The AgentSession kind of the public API as pydantic models (exported by :mod:`agentsession_api.types`,
from which `make crds` generates its CRD): its spec, its status and the object.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from agentsession_api import cel_rules, durations, names, patterns
from agentsession_api.phases import IdleAction, Phase
from agentsession_api.types_common import (
    MAX_ENV,
    MAX_ENV_VALUE,
    MAX_SESSION_LABELS,
    MAX_VOLUME_CLAIM_TEMPLATES,
    AnnotationMap,
    Condition,
    DurationText,
    LabelMap,
    QuantityText,
    WarmPoolRef,
    _Object,
    _Spec,
    _Status,
    annotation_map_field,
    conditions_field,
    duration_field,
    label_map_field,
    observed_generation_field,
    quantity_field,
    timestamp_field,
)

LaunchType = Literal["warm", "cold"]
AccessMode = Literal["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]


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
    pod_spec_digest: str | None = Field(
        None,
        alias="podSpecDigest",
        description=(
            "SHA-256 of the Sandbox's pod spec the checkpoint was taken from: a wake into another spec starts "
            "fresh (PodSpecChanged) instead of restoring the old processes into it."
        ),
        max_length=64,
    )


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


class AgentSession(_Object):
    """A sandbox session for an agent: one SandboxClaim with a TTL, an idle timeout and policy checks."""

    kind: str = Field(names.SESSION_KIND)
    spec: AgentSessionSpec = Field(default_factory=lambda: AgentSessionSpec.model_validate({}))
    status: AgentSessionStatus | None = None
