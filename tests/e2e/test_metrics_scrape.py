"""Every metric the shipped alerts and dashboard use is in a real scrape (issue 27).

The operator's own from its /metrics, kube-apiserver's admission metrics from the API server's (after
the policy webhook has answered it: they appear with the first call), ``up`` from Prometheus itself.
"""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import Kube, OperatorProcess
from tests.e2e.test_policy import policed  # noqa: F401 - the fixture: a policy the webhook enforces
from tests.opskit import promql

pytestmark = pytest.mark.e2e


def test_rules_and_dashboard_metrics_are_in_real_scrapes(
    kube: Kube,
    operator: OperatorProcess,
    policed: str,  # noqa: F811
) -> None:
    scrape = httpx.get(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=10).text
    own = promql.exposed_names(scrape)
    apiserver = promql.exposed_names(kube.run("get", "--raw", "/metrics").stdout)
    used = promql.used_names()
    missing = sorted(
        name
        for name in used - promql.FROM_PROMETHEUS
        if name not in (apiserver if name.startswith(promql.APISERVER_PREFIX) else own)
    )
    assert not missing, f"used by the rules or the dashboard, in no real scrape: {missing}"
    assert {"agentsession_leader", "agentsession_memory_limit_bytes", "process_resident_memory_bytes"} <= own
    # The operator the tests run reconciles: the "no leader" alert stays quiet for it.
    families = {f.name: f for f in text_string_to_metric_families(scrape)}
    assert [s.value for s in families["agentsession_leader"].samples] == [1.0]
