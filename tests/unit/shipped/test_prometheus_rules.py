"""The shipped Prometheus alerts: promtool checks and unit-tests them, and they use only real metrics."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.opskit import promql

HERE = Path(__file__).resolve().parent
PROMTOOL = "promtool"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which(PROMTOOL) is None:
        pytest.fail("promtool is missing: run `python -m devcluster.prereqs ops` (Debian package prometheus)")
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120)


def test_promtool_checks_the_rules() -> None:
    done = _promtool("check", "rules", str(promql.RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests_pass() -> None:
    done = _promtool("test", "rules", str(HERE / "prometheus" / "rules_test.yaml"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_promtool_case_that_fires_it() -> None:
    tests = yaml.safe_load((HERE / "prometheus" / "rules_test.yaml").read_text())["tests"]
    fired = {c["alertname"] for t in tests for c in t.get("alert_rule_test", []) if c.get("exp_alerts")}
    alerts = {r["alert"] for g in yaml.safe_load(promql.RULES.read_text())["groups"] for r in g["rules"]}
    assert alerts == fired


def test_config_prometheus_rule_is_the_chart_rule_file() -> None:
    shipped = yaml.safe_load((promql.CONFIG / "prometheus_rule.yaml").read_text())
    assert shipped["kind"] == "PrometheusRule"
    assert shipped["spec"] == yaml.safe_load(promql.RULES.read_text()), "config/prometheus drifted from the chart"


def test_rules_and_dashboard_use_only_metrics_the_operator_exports() -> None:
    exported = promql.operator_registry_names()
    unknown = {
        name
        for name in promql.used_names()
        if name not in exported and name not in promql.FROM_PROMETHEUS and not name.startswith(promql.APISERVER_PREFIX)
    }
    assert not unknown, f"not in the operator's registry: {sorted(unknown)}"


def test_metric_names_are_read_from_promql() -> None:
    expr = 'sum by (kind) (rate(agentsession_reconcile_errors_total{job="x", kind=~"a|b"}[5m])) / on() up'
    assert promql.metric_names(expr) == {"agentsession_reconcile_errors_total", "up"}
    assert promql.metric_names("histogram_quantile(0.9, sum by (le) (rate(x_bucket[$__rate_interval])))") == {
        "x_bucket"
    }


# Where the runbooks are read: docs/operations.md as the repository's host renders it.
RUNBOOKS = "https://github.com/agentsession/agentsession/blob/main/docs/operations.md#"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation but - and _ dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_links_its_runbook_section() -> None:
    doc = (promql.ROOT / "docs" / "operations.md").read_text()
    anchors = {_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", doc, re.M)}
    rules = [r for g in yaml.safe_load(promql.RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]
    assert rules
    for rule in rules:
        url = rule["annotations"].get("runbook_url", "")
        assert url.startswith(RUNBOOKS), f"{rule['alert']}: runbook_url {url!r}"
        assert url.removeprefix(RUNBOOKS) in anchors, f"{rule['alert']}: no section #{url.removeprefix(RUNBOOKS)}"


def test_the_anchor_is_githubs() -> None:
    assert _anchor("Sharding: more sessions than one replica holds") == "sharding-more-sessions-than-one-replica-holds"
    assert _anchor("LangGraph: one sandbox per thread under `langgraph dev`") == (
        "langgraph-one-sandbox-per-thread-under-langgraph-dev"
    )
