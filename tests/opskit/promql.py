"""The metric names the shipped alerts and dashboard use, and the ones the operator really exports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "agentsession"
RULES = CHART / "files" / "prometheus_rules.yaml"
DASHBOARD = CHART / "files" / "grafana_dashboard.json"
CONFIG = ROOT / "config" / "prometheus"

# Series not from the operator's registry: Prometheus's own, and kube-apiserver's admission metrics (only
# the API server sees a webhook it cannot call). tests/e2e/test_metrics_scrape.py finds them in a real scrape.
FROM_PROMETHEUS = frozenset({"up"})
APISERVER_PREFIX = "apiserver_"

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# PromQL's words that are not metric names (function names are told by the "(" after them).
_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}
    | {"inf", "nan"}
)


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers outside strings, braces' label names, durations
    and function or keyword names."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", "{}", text)  # label matchers
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\[[^\]]*\]", "[]", text)  # range durations
    text = re.sub(r"\$\w+", " ", text)  # Grafana variables ($__rate_interval, $namespace)
    names = set()
    for match in _IDENT.finditer(text):
        word = match.group()
        if word.lower() in _KEYWORDS or re.fullmatch(r"\d+[smhdwy]", word):
            continue
        follows = text[match.end() :].lstrip()[:1]
        if follows == "(":  # a function call
            continue
        names.add(word)
    return names


def rule_exprs() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # collapsed rows


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in panels(dashboard()) for t in p.get("targets", []) if t.get("expr")]


def used_names() -> set[str]:
    return {name for expr in rule_exprs() + dashboard_exprs() for name in metric_names(expr)}


_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gauge": ("",),
    "info": ("_info",),
}


def sample_names(families: Iterable[Any]) -> set[str]:
    """Every series name a scrape of these prometheus_client metric families can carry."""
    names = set()
    for family in families:
        for suffix in _SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
        names.update(sample.name for sample in family.samples)
    return names


def exposed_names(text: str) -> set[str]:
    """Series names in a scrape's text, as Prometheus stores them (no parser renaming: kube-apiserver's
    counters end in _count, not _total), plus those of families declared without samples yet."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            if kind.strip() in ("histogram", "summary"):
                names.update(name + suffix for suffix in _SUFFIXES[kind.strip()])
            elif kind.strip() == "counter" and not name.endswith("_total"):
                names.add(name + "_total")  # prometheus_client declares a counter by its name without _total
            else:
                names.add(name)
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def operator_registry_names() -> set[str]:
    from prometheus_client import REGISTRY

    import agentsession_operator.infra.metrics  # noqa: F401 - registers the operator's metrics

    return sample_names(REGISTRY.collect())
