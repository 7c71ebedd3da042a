"""Kubernetes LabelSelector semantics (matchLabels and matchExpressions), for policy selection, and kopf's
namespace patterns (the operator's --namespace), for what the operator watches."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from typing import Any

_NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


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


def namespace_matches(namespace: str, pattern: str) -> bool:
    """kopf's ``--namespace`` pattern syntax: comma-separated globs, ``!glob`` excludes; a leading
    exclusion implies a catch-all first. (kopf has this matcher only in a private module.)"""
    globs = [glob.strip() for glob in pattern.split(",")]
    if not globs or globs[0].startswith("!"):
        globs.insert(0, "*")
    first = matches = fnmatch.fnmatch(namespace, globs[0])
    for glob in globs[1:]:
        if glob.startswith("!"):
            matches = matches and not fnmatch.fnmatch(namespace, glob[1:])
        else:
            matches = matches or (first and fnmatch.fnmatch(namespace, glob))
    return matches


def listed_namespaces(patterns: Iterable[str]) -> tuple[str, ...] | None:
    """The namespaces to list one by one when every --namespace pattern names exactly one (no glob, no
    exclusion, no comma): a replica given its namespaces reads nothing of the others (issue 53 item 3).
    None: list cluster-wide and keep what `watched` accepts (no patterns, or a pattern that matches many)."""
    names = tuple(patterns)
    if not names or any(not _NAMESPACE_NAME.fullmatch(name) for name in names):
        return None
    return tuple(dict.fromkeys(names))


def watched(namespace: str | None, patterns: Iterable[str]) -> bool:
    """True when the operator, run with these --namespace patterns (none: every namespace), watches it."""
    patterns = tuple(patterns)
    if not patterns:
        return True
    return namespace is not None and any(namespace_matches(namespace, p) for p in patterns)
