"""The shipped Grafana dashboard: well-formed, every query parses (promtool), the same file everywhere."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.opskit import promql

# Grafana's interval variables, as Grafana substitutes them before Prometheus sees the query.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}


def test_the_dashboard_has_what_grafana_needs() -> None:
    board = promql.dashboard()
    assert board["uid"] == "agentsession-operator" and board["title"] and isinstance(board["schemaVersion"], int)
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource"]
    panels = list(promql.panels(board))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        assert panel["type"] in {"timeseries", "stat", "row"} and panel["title"], panel
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        for target in panel.get("targets", []):
            assert target["refId"] and target["expr"], (panel["title"], target)
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_every_query_parses(tmp_path: Path) -> None:
    if shutil.which("promtool") is None:
        pytest.fail("promtool is missing: run `python -m devcluster.prereqs ops` (Debian package prometheus)")
    rules = []
    for i, expr in enumerate(promql.dashboard_exprs()):
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"an unknown Grafana variable in {expr}"
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "dashboard_rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout


def test_config_ships_the_chart_dashboard() -> None:
    (config_map,) = [d for d in yaml.safe_load_all((promql.CONFIG / "grafana_dashboard.yaml").read_text()) if d]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"  # the Grafana sidecar's default label
    (text,) = config_map["data"].values()
    assert json.loads(text) == promql.dashboard(), "config/prometheus/grafana_dashboard.yaml drifted from the chart"


def test_queries_name_the_operator_job() -> None:
    for expr in promql.dashboard_exprs():
        if re.search(r"\bagentsession_|process_|\bup\{", expr):
            assert 'job="agentsession-operator"' in expr, expr
