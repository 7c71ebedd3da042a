"""Read-only views of the API's bodies: generated from the pydantic models (agentsession_api.types) by
`python -m agentsession_api.viewgen`. Do not edit: change the models and run `make crds`."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agentsession_api.timestamps import parse_time


class _View:
    __slots__ = ("present", "raw")

    def __init__(self, raw: Mapping[str, Any] | None) -> None:
        self.present = isinstance(raw, Mapping)  # the body holds this part, maybe empty
        self.raw: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}

    def __bool__(self) -> bool:
        return bool(self.raw)


class AgentSessionSpecView(_View):
    """A AgentSessionSpec (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def warm_pool_ref(self) -> WarmPoolRefView:
        return WarmPoolRefView(self.raw.get("warmPoolRef"))

    @property
    def ttl(self) -> str | None:
        return self.raw.get("ttl")

    @property
    def idle_timeout(self) -> str | None:
        return self.raw.get("idleTimeout")

    @property
    def idle_action(self) -> str | None:
        return self.raw.get("idleAction")

    @property
    def env(self) -> list[EnvVarView]:
        return [EnvVarView(item) for item in self.raw.get("env") or []]

    @property
    def volume_claim_templates(self) -> list[VolumeClaimTemplateView]:
        return [VolumeClaimTemplateView(item) for item in self.raw.get("volumeClaimTemplates") or []]

    @property
    def labels(self) -> dict[str, str] | None:
        return self.raw.get("labels")

    @property
    def pod_labels(self) -> dict[str, str] | None:
        return self.raw.get("podLabels")

    @property
    def pod_annotations(self) -> dict[str, str] | None:
        return self.raw.get("podAnnotations")

    @property
    def suspend(self) -> bool | None:
        return self.raw.get("suspend")

    @property
    def fork_from(self) -> ForkFromView:
        return ForkFromView(self.raw.get("forkFrom"))


class AgentSessionPolicySpecView(_View):
    """A AgentSessionPolicySpec (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def selector(self) -> SessionSelectorView:
        return SessionSelectorView(self.raw.get("selector"))

    @property
    def defaults(self) -> PolicyDefaultsView:
        return PolicyDefaultsView(self.raw.get("defaults"))

    @property
    def limits(self) -> PolicyLimitsView:
        return PolicyLimitsView(self.raw.get("limits"))

    @property
    def labels(self) -> LabelRulesView:
        return LabelRulesView(self.raw.get("labels"))

    @property
    def cleanup(self) -> CleanupRulesView:
        return CleanupRulesView(self.raw.get("cleanup"))

    @property
    def egress(self) -> EgressRulesView:
        return EgressRulesView(self.raw.get("egress"))


class ResolvedSettingsView(_View):
    """A ResolvedSettings (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def warm_pool_ref(self) -> WarmPoolRefView:
        return WarmPoolRefView(self.raw.get("warmPoolRef"))

    @property
    def ttl(self) -> str | None:
        return self.raw.get("ttl")

    @property
    def idle_timeout(self) -> str | None:
        return self.raw.get("idleTimeout")

    @property
    def idle_action(self) -> str | None:
        return self.raw.get("idleAction")

    @property
    def max_ttl(self) -> str | None:
        return self.raw.get("maxTtl")

    @property
    def max_idle_timeout(self) -> str | None:
        return self.raw.get("maxIdleTimeout")

    @property
    def pending_max_ttl(self) -> str | None:
        return self.raw.get("pendingMaxTtl")

    @property
    def pending_max_ttl_at(self) -> datetime | None:
        return parse_time(self.raw.get("pendingMaxTtlAt"))


class ConditionView(_View):
    """A Condition (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def type(self) -> str | None:
        return self.raw.get("type")

    @property
    def status(self) -> str | None:
        return self.raw.get("status")

    @property
    def reason(self) -> str | None:
        return self.raw.get("reason")

    @property
    def message(self) -> str | None:
        return self.raw.get("message")

    @property
    def last_transition_time(self) -> datetime | None:
        return parse_time(self.raw.get("lastTransitionTime"))

    @property
    def observed_generation(self) -> int | None:
        return self.raw.get("observedGeneration")


class LineageEntryView(_View):
    """A LineageEntry (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def name(self) -> str | None:
        return self.raw.get("name")

    @property
    def created_at(self) -> datetime | None:
        return parse_time(self.raw.get("createdAt"))

    @property
    def labels(self) -> dict[str, str] | None:
        return self.raw.get("labels")


class WarmPoolRefView(_View):
    """A WarmPoolRef (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def name(self) -> str | None:
        return self.raw.get("name")


class EnvVarView(_View):
    """A EnvVar (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def name(self) -> str | None:
        return self.raw.get("name")

    @property
    def value(self) -> str | None:
        return self.raw.get("value")

    @property
    def container_name(self) -> str | None:
        return self.raw.get("containerName")


class VolumeClaimTemplateView(_View):
    """A VolumeClaimTemplate (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def metadata(self) -> VolumeClaimTemplateMetadataView:
        return VolumeClaimTemplateMetadataView(self.raw.get("metadata"))

    @property
    def spec(self) -> VolumeClaimTemplateSpecView:
        return VolumeClaimTemplateSpecView(self.raw.get("spec"))


class ForkFromView(_View):
    """A ForkFrom (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def name(self) -> str | None:
        return self.raw.get("name")


class SessionSelectorView(_View):
    """A SessionSelector (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def match_labels(self) -> dict[str, str] | None:
        return self.raw.get("matchLabels")

    @property
    def match_expressions(self) -> list[SelectorRequirementView]:
        return [SelectorRequirementView(item) for item in self.raw.get("matchExpressions") or []]


class PolicyDefaultsView(_View):
    """A PolicyDefaults (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def warm_pool_ref(self) -> WarmPoolRefView:
        return WarmPoolRefView(self.raw.get("warmPoolRef"))

    @property
    def ttl(self) -> str | None:
        return self.raw.get("ttl")

    @property
    def idle_timeout(self) -> str | None:
        return self.raw.get("idleTimeout")

    @property
    def idle_action(self) -> str | None:
        return self.raw.get("idleAction")

    @property
    def labels(self) -> dict[str, str] | None:
        return self.raw.get("labels")

    @property
    def pod_labels(self) -> dict[str, str] | None:
        return self.raw.get("podLabels")


class PolicyLimitsView(_View):
    """A PolicyLimits (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def max_ttl(self) -> str | None:
        return self.raw.get("maxTtl")

    @property
    def max_ttl_grace_period(self) -> str | None:
        return self.raw.get("maxTtlGracePeriod")

    @property
    def max_idle_timeout(self) -> str | None:
        return self.raw.get("maxIdleTimeout")

    @property
    def allowed_warm_pools(self) -> list[str] | None:
        return self.raw.get("allowedWarmPools")

    @property
    def max_storage(self) -> str | None:
        return self.raw.get("maxStorage")

    @property
    def env(self) -> EnvRulesView:
        return EnvRulesView(self.raw.get("env"))

    @property
    def pod_annotations(self) -> KeyRulesView:
        return KeyRulesView(self.raw.get("podAnnotations"))

    @property
    def allowed_storage_classes(self) -> list[str] | None:
        return self.raw.get("allowedStorageClasses")

    @property
    def volume_annotations(self) -> KeyRulesView:
        return KeyRulesView(self.raw.get("volumeAnnotations"))

    @property
    def allow_forks(self) -> bool | None:
        return self.raw.get("allowForks")

    @property
    def allow_hibernate(self) -> bool | None:
        return self.raw.get("allowHibernate")

    @property
    def max_checkpoint_size(self) -> str | None:
        return self.raw.get("maxCheckpointSize")

    @property
    def max_hibernated_size(self) -> str | None:
        return self.raw.get("maxHibernatedSize")


class LabelRulesView(_View):
    """A LabelRules (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def required(self) -> list[str] | None:
        return self.raw.get("required")

    @property
    def allowed_prefixes(self) -> list[str] | None:
        return self.raw.get("allowedPrefixes")

    @property
    def values(self) -> dict[str, str] | None:
        return self.raw.get("values")


class CleanupRulesView(_View):
    """A CleanupRules (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def delete_finished_after(self) -> str | None:
        return self.raw.get("deleteFinishedAfter")

    @property
    def max_sessions_per_label(self) -> SessionLimitView:
        return SessionLimitView(self.raw.get("maxSessionsPerLabel"))

    @property
    def max_sessions_per_namespace(self) -> int | None:
        return self.raw.get("maxSessionsPerNamespace")


class EgressRulesView(_View):
    """A EgressRules (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def allow_cidrs(self) -> list[str] | None:
        return self.raw.get("allowCIDRs")

    @property
    def ports(self) -> list[EgressPortView]:
        return [EgressPortView(item) for item in self.raw.get("ports") or []]

    @property
    def dns(self) -> bool | None:
        return self.raw.get("dns")


class VolumeClaimTemplateMetadataView(_View):
    """A VolumeClaimTemplateMetadata (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def name(self) -> str | None:
        return self.raw.get("name")

    @property
    def labels(self) -> dict[str, str] | None:
        return self.raw.get("labels")

    @property
    def annotations(self) -> dict[str, str] | None:
        return self.raw.get("annotations")


class VolumeClaimTemplateSpecView(_View):
    """A VolumeClaimTemplateSpec (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def access_modes(self) -> list[str] | None:
        return self.raw.get("accessModes")

    @property
    def resources(self) -> VolumeResourcesView:
        return VolumeResourcesView(self.raw.get("resources"))

    @property
    def storage_class_name(self) -> str | None:
        return self.raw.get("storageClassName")

    @property
    def volume_mode(self) -> str | None:
        return self.raw.get("volumeMode")


class SelectorRequirementView(_View):
    """A SelectorRequirement (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def key(self) -> str | None:
        return self.raw.get("key")

    @property
    def operator(self) -> str | None:
        return self.raw.get("operator")

    @property
    def values(self) -> list[str] | None:
        return self.raw.get("values")


class EnvRulesView(_View):
    """A EnvRules (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def allow(self) -> list[str] | None:
        return self.raw.get("allow")

    @property
    def deny(self) -> list[str] | None:
        return self.raw.get("deny")


class KeyRulesView(_View):
    """A KeyRules (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def allow(self) -> list[str] | None:
        return self.raw.get("allow")

    @property
    def deny(self) -> list[str] | None:
        return self.raw.get("deny")


class SessionLimitView(_View):
    """A SessionLimit (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def key(self) -> str | None:
        return self.raw.get("key")

    @property
    def max(self) -> int | None:
        return self.raw.get("max")

    @property
    def count_across_values(self) -> bool | None:
        return self.raw.get("countAcrossValues")


class EgressPortView(_View):
    """A EgressPort (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def port(self) -> int | None:
        return self.raw.get("port")

    @property
    def protocol(self) -> str | None:
        return self.raw.get("protocol")


class VolumeResourcesView(_View):
    """A VolumeResources (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def requests(self) -> StorageRequestsView:
        return StorageRequestsView(self.raw.get("requests"))


class StorageRequestsView(_View):
    """A StorageRequests (agentsession_api.types) as the API server sends it."""

    __slots__ = ()

    @property
    def storage(self) -> str | None:
        return self.raw.get("storage")
