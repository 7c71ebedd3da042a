"""Kubernetes LabelSelector semantics (matchLabels and matchExpressions), for policy selection."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """True when ``labels`` satisfy every requirement; an empty or missing selector selects everything."""
    labels = labels or {}
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(_requirement_matches(req, labels) for req in selector.get("matchExpressions") or [])


def _requirement_matches(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = requirement.get("key", "")
    operator = requirement.get("operator")
    values = set(requirement.get("values") or [])
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":  # like Kubernetes: a missing label satisfies NotIn
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False  # an unknown operator selects nothing, never everything
