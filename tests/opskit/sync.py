"""Write config/prometheus/'s PrometheusRule and dashboard ConfigMap from the chart's files (their one source).

``python -m tests.opskit.sync`` after changing charts/agentsession/files/; the unit tests fail on drift.
"""

from __future__ import annotations

import json

import yaml

from tests.opskit import promql

RULE_HEADER = """\
# Alerts on the agentsession operator (prometheus-operator's PrometheusRule; docs/operations.md).
# Generated from charts/agentsession/files/prometheus_rules.yaml by `python -m tests.opskit.sync`: edit that.
"""
DASHBOARD_HEADER = """\
# The Grafana dashboard (charts/agentsession/files/grafana_dashboard.json, copied by
# `python -m tests.opskit.sync`), labelled for the Grafana sidecar of kube-prometheus-stack.
"""
LABELS = {"app.kubernetes.io/name": "agentsession-operator"}
NAMESPACE = "agentsession-system"


def rule() -> dict[str, object]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "agentsession-operator", "namespace": NAMESPACE, "labels": LABELS},
        "spec": yaml.safe_load(promql.RULES.read_text()),
    }


def dashboard_config_map() -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "agentsession-grafana-dashboard",
            "namespace": NAMESPACE,
            "labels": {**LABELS, "grafana_dashboard": "1"},
        },
        "data": {"agentsession-operator.json": json.dumps(promql.dashboard(), indent=2) + "\n"},
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the dashboard's JSON) as literal blocks, readable in a diff."""


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _str)


def main() -> None:
    dump = {"sort_keys": False, "width": 1000, "Dumper": _Dumper}
    (promql.CONFIG / "prometheus_rule.yaml").write_text(RULE_HEADER + yaml.dump(rule(), **dump))
    (promql.CONFIG / "grafana_dashboard.yaml").write_text(DASHBOARD_HEADER + yaml.dump(dashboard_config_map(), **dump))


if __name__ == "__main__":
    main()
