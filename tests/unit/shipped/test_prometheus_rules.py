"""The shipped Prometheus alerts: promtool checks and unit-tests them, and they use only real metrics."""

from __future__ import annotations

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
