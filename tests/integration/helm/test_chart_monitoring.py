"""The chart's monitoring flags render config/prometheus/ (ServiceMonitor, PrometheusRule, dashboard).

Off by default (they need prometheus-operator's CRDs); on, each object equals config/prometheus's after
Helm's labels are removed, and a custom namespace reaches every one of them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from devcluster import build
from tests.integration.helm.test_chart import ROOT, _objects, _template, differences, helm  # noqa: F401

FLAGS = (
    "monitoring.serviceMonitor.enabled",
    "monitoring.prometheusRule.enabled",
    "monitoring.grafanaDashboard.enabled",
)


def _on(*extra: str) -> list[str]:
    return [arg for flag in FLAGS for arg in ("--set", f"{flag}=true")] + list(extra)


def _monitoring(objects: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    """The chart's monitoring objects (its other ConfigMaps are not)."""
    return {
        k: v
        for k, v in objects.items()
        if k.split("/")[0] in ("ServiceMonitor", "PrometheusRule") or k.endswith("/agentsession-grafana-dashboard")
    }


def _kustomize_prometheus() -> str:
    build.build(build.KUBERNETES)
    proc = subprocess.run(
        [str(build.KUBERNETES.path("kubectl")), "kustomize", str(ROOT / "config" / "prometheus")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_monitoring_is_off_by_default(helm: Path) -> None:  # noqa: F811
    assert _monitoring(_objects(_template(helm))) == {}


def test_monitoring_flags_render_config_prometheus(helm: Path) -> None:  # noqa: F811
    config = _objects(_kustomize_prometheus())
    chart = _monitoring(_objects(_template(helm, *_on())))
    assert len(config) == 3 and set(chart) == set(config)
    found = differences(config, chart)
    assert not found, "the chart's monitoring and config/prometheus differ:\n" + "\n".join(found)


def test_monitoring_follows_the_namespace_and_selector_labels(helm: Path) -> None:  # noqa: F811
    chart = _objects(
        _template(helm, *_on("--set", "namespace.name=ops", "--set", "monitoring.serviceMonitor.labels.release=kps"))
    )
    monitor = chart["ServiceMonitor/ops/agentsession-operator"]
    assert monitor["metadata"]["labels"]["release"] == "kps"  # type: ignore[index]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["ops"]}  # type: ignore[index]
    assert "PrometheusRule/ops/agentsession-operator" in chart
    assert "ConfigMap/ops/agentsession-grafana-dashboard" in chart
