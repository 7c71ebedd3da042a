"""The pieces both kinds of the public API share (see :mod:`agentsession_api.types`): every bound, the
validators and field factories that give a kind of value the same bounded schema wherever it appears, the
base models (specs refuse unknown fields, statuses tolerate them) and the shared models.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from agentsession_api import cel_rules, durations, names, patterns, quantities

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


class _Object(BaseModel):
    """The envelope of an object of this API (kind, spec and status come with each kind)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    api_version: str = Field(names.API_VERSION, alias="apiVersion")
    metadata: dict[str, Any] = Field(default_factory=dict)


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
