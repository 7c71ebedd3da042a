"""CEL rules (``x-kubernetes-validations``) the API server runs at admission, so no webhook is needed.

Each builder returns one rule dict naming the field and what is allowed. Regexes are CEL raw strings
(``r'...'``) so backslashes reach RE2 unchanged. Every value a rule walks is bounded in the schema
(maxLength, maxItems, maxProperties), which keeps the estimated cost inside the API server's budget.
"""

from __future__ import annotations

from typing import Any, Final

from agentsession_api import durations, names, patterns

Rule = dict[str, Any]

FIELD_VALUE_INVALID: Final = "FieldValueInvalid"
FIELD_VALUE_FORBIDDEN: Final = "FieldValueForbidden"
FIELD_VALUE_DUPLICATE: Final = "FieldValueDuplicate"

LABEL_KEY_TEXT: Final = (
    "an optional DNS subdomain prefix of at most 253 characters and '/', then a name of at most 63 characters "
    "made of alphanumerics, '-', '_' and '.', starting and ending with an alphanumeric"
)


def positive_duration(path: str) -> Rule:
    """The duration parses (Go syntax, see durations.py) and is greater than zero."""
    return {
        "rule": f"self.matches(r'{durations.DURATION_PATTERN}') && duration(self) > duration('0s')",
        "message": f"{path} must be {durations.ALLOWED_TEXT}",
        "reason": FIELD_VALUE_INVALID,
    }


def cidr(path: str) -> Rule:
    """A CIDR in canonical form (no host bits set): what a NetworkPolicy ipBlock accepts."""
    return {
        "rule": "isCIDR(self) && cidr(self).masked() == cidr(self)",
        "message": f"{path} must be a CIDR such as 10.1.0.0/16 or 2001:db8::/32, with no host bits set",
        "reason": FIELD_VALUE_INVALID,
    }


def qualified_keys(path: str) -> Rule:
    """Every map key is a valid label/annotation key (the schema cannot put a pattern on map keys)."""
    return {
        "rule": (
            f"self.all(k, k.matches(r'{patterns.QUALIFIED_NAME}') && "
            f"(!k.contains('/') || k.indexOf('/') <= {patterns.DNS1123_SUBDOMAIN_MAX}))"
        ),
        "message": f"{path} keys must be {LABEL_KEY_TEXT}",
        "reason": FIELD_VALUE_INVALID,
    }


def prefixed_pod_label_keys(path: str) -> Rule:
    """agent-sandbox refuses unprefixed pod labels (terminal InvalidMetadata): refuse them here instead."""
    domains = ", ".join(names.DEFAULT_ALLOWED_LABEL_DOMAINS)
    return {
        "rule": "self.all(k, k.contains('/'))",
        "message": (
            f"{path} keys need a domain prefix that agent-sandbox allows (default {domains}, "
            f"e.g. {names.DEFAULT_ALLOWED_LABEL_DOMAINS[0]}/team): agent-sandbox refuses unprefixed pod labels"
        ),
        "reason": FIELD_VALUE_INVALID,
    }


def unreserved_label_keys(path: str) -> Rule:
    """Our identifying labels and agent-sandbox's must not be set (or spoofed) by users."""
    domains = "|".join(d.replace(".", r"\.") for d in names.RESERVED_LABEL_DOMAINS)
    return {
        # A domain and its subdomains (extensions.agents.x-k8s.io/x too).
        "rule": f"self.all(k, !k.matches(r'^([^/]*\\.)?({domains})/'))",
        "message": (
            f"{path} keys in the {' and '.join(names.RESERVED_LABEL_DOMAINS)} domains (and their subdomains) are "
            "reserved for the operator and agent-sandbox"
        ),
        "reason": FIELD_VALUE_FORBIDDEN,
    }


def unrestricted_annotation_keys(path: str) -> Rule:
    """agent-sandbox refuses pod annotations in system domains (terminal InvalidMetadata): refuse them here."""
    domains = "|".join(d.replace(".", r"\.") for d in names.RESTRICTED_ANNOTATION_DOMAINS)
    exempt = " || ".join(f"k == '{key}'" for key in names.EXEMPT_ANNOTATION_KEYS)
    return {
        "rule": f"self.all(k, {exempt} || !k.matches(r'^([^/]*\\.)?({domains})/'))",
        "message": (
            f"{path} keys in the {', '.join(names.RESTRICTED_ANNOTATION_DOMAINS)} domains (and their "
            f"subdomains) are refused by agent-sandbox, except {', '.join(names.EXEMPT_ANNOTATION_KEYS)}"
        ),
        "reason": FIELD_VALUE_FORBIDDEN,
    }


RESTORE_ANNOTATION_TEXT = (
    "is set only by the operator, on a hibernated session's wake: a session may not name a checkpoint "
    "image to restore its sandbox from (issue 33)"
)


def operator_only_annotation_keys(path: str) -> Rule:
    """The restore annotation: a pod naming it starts from a checkpoint image of its namespace (another
    session's memory, secrets included)."""
    return {
        "rule": f"!('{names.ANNOTATION_RESTORE_FROM}' in self)",
        "message": f"{path} key {names.ANNOTATION_RESTORE_FROM} {RESTORE_ANNOTATION_TEXT}",
        "reason": FIELD_VALUE_FORBIDDEN,
    }


def immutable(field: str, hint: str) -> Rule:
    """A transition rule on the parent object, so adding or removing the field counts as a change too."""
    return {
        "rule": (
            f"has(self.{field}) == has(oldSelf.{field}) && (!has(self.{field}) || self.{field} == oldSelf.{field})"
        ),
        "message": f"spec.{field} is immutable: {hint}",
        "fieldPath": f".{field}",
        "reason": FIELD_VALUE_FORBIDDEN,
    }


def exclusive(first: str, second: str, hint: str) -> Rule:
    """At most one of two optional fields of the object is set."""
    return {
        "rule": f"!has(self.{first}) || !has(self.{second})",
        "message": f"spec.{first} and spec.{second} cannot both be set: {hint}",
        "fieldPath": f".{second}",
        "reason": FIELD_VALUE_FORBIDDEN,
    }


def unique_by(path: str, key_expr: str) -> Rule:
    """List items are unique by ``key_expr`` (for lists whose key is nested and so cannot be a list-map)."""
    return {
        "rule": f"self.all(a, self.exists_one(b, b.{key_expr} == a.{key_expr}))",
        "message": f"{path} must not repeat a {key_expr}",
        "reason": FIELD_VALUE_DUPLICATE,
    }


def selector_values(path: str) -> Rule:
    """LabelSelector semantics: In/NotIn need values, Exists/DoesNotExist must have none."""
    return {
        "rule": (
            "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) "
            ": (!has(self.values) || size(self.values) == 0)"
        ),
        "message": f"{path}: operators In and NotIn need values; Exists and DoesNotExist take none",
        "reason": FIELD_VALUE_INVALID,
    }
