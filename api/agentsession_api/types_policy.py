"""The AgentSessionPolicy kind of the public API as pydantic models (exported by
:mod:`agentsession_api.types`, from which `make crds` generates its CRD): selector, defaults, limits, label
rules, cleanup, egress, its status and the object.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field

from agentsession_api import cel_rules, names, patterns
from agentsession_api.phases import IdleAction
from agentsession_api.types_common import (
    MAX_CIDR,
    MAX_MAP_ENTRIES,
    MAX_PATTERNS,
    Condition,
    DurationText,
    LabelMap,
    QuantityText,
    WarmPoolRef,
    _Object,
    _Spec,
    _Status,
    conditions_field,
    duration_field,
    label_map_field,
    observed_generation_field,
    quantity_field,
)

SelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist"]


def _check_cidr(value: str) -> str:
    network = ipaddress.ip_network(value, strict=True)  # ValueError: not a CIDR, or host bits set
    if str(network) != value:
        raise ValueError(f"{value!r} is not in canonical form ({network})")
    return value


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
