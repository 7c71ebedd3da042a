"""The shipped Argo CD health checks (config/argocd/resource_customizations), run with a real Lua 5.1.

testdata/ holds objects captured from real e2e runs (tests/e2e/test_argocd_health.py); health_test.yaml
says what Argo CD must show for each, in Argo CD's own test layout. The synthetic cases below cover what
a run cannot pin down (a deletion, a status older than the spec, an operator that has not seen it yet).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentsession_api.phases import Phase
from tests.opskit import argocd

ROOT = Path(__file__).resolve().parents[3]
OPERATIONS = ROOT / "docs" / "operations.md"
EXPECTED_BY_PHASE = {
    Phase.PENDING: "Progressing",
    Phase.PROVISIONING: "Progressing",
    Phase.READY: "Healthy",
    Phase.SUSPENDED: "Suspended",
    Phase.EXPIRED: "Degraded",
    Phase.FAILED: "Degraded",
    Phase.TERMINATING: "Progressing",
}


def _recorded() -> list[tuple[str, Path, dict[str, Any]]]:
    cases = []
    for kind in argocd.KINDS:
        folder = argocd.script(kind).parent
        for test in yaml.safe_load((folder / "health_test.yaml").read_text())["tests"]:
            cases.append((kind, folder / test["inputPath"], test["healthStatus"]))
    return cases


RECORDED = _recorded()


@pytest.mark.parametrize(("kind", "path", "expected"), RECORDED, ids=[f"{c[0]}-{c[1].stem}" for c in RECORDED])
def test_captured_objects_get_their_recorded_health(kind: str, path: Path, expected: dict[str, str]) -> None:
    got = argocd.health(kind, yaml.safe_load(path.read_text()))
    assert (got.status, got.message) == (expected["status"], expected["message"])


def test_every_phase_and_the_invalid_policy_were_captured() -> None:
    phases = {yaml.safe_load(p.read_text())["status"].get("phase") for k, p, _ in RECORDED if k == "AgentSession"}
    assert {"Ready", "Provisioning", "Suspended", "Expired", "Failed"} <= phases
    policies = {e["status"] for k, _, e in RECORDED if k == "AgentSessionPolicy"}
    assert policies == {"Healthy", "Degraded"}


@pytest.mark.parametrize("phase", list(Phase))
def test_every_phase_maps_to_its_health(phase: Phase) -> None:
    obj = {"metadata": {"generation": 2}, "status": {"phase": str(phase), "observedGeneration": 2}}
    assert argocd.health("AgentSession", obj).status == EXPECTED_BY_PHASE[phase]


def test_failed_and_expired_say_why() -> None:
    failed = {
        "status": {
            "phase": "Failed",
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "PolicyViolation",
                    "message": "ttl 48h exceeds maxTtl 24h",
                }
            ],
        }
    }
    assert argocd.health("AgentSession", failed).message == "Failed: PolicyViolation: ttl 48h exceeds maxTtl 24h"
    expired = {
        "status": {"phase": "Expired", "conditions": [{"type": "Expired", "status": "True", "reason": "IdleTimeout"}]}
    }
    assert argocd.health("AgentSession", expired).message.startswith("Expired: IdleTimeout")


def test_a_deleting_session_is_progressing_whatever_its_phase() -> None:
    obj = {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": "Ready"}}
    assert argocd.health("AgentSession", obj).status == "Progressing"


@pytest.mark.parametrize("kind", argocd.KINDS)
def test_a_status_older_than_the_spec_is_progressing(kind: str) -> None:
    obj = {
        "metadata": {"generation": 3},
        "status": {
            "phase": "Ready",
            "observedGeneration": 2,
            "conditions": [{"type": "Valid", "status": "True", "reason": "Valid"}],
        },
    }
    got = argocd.health(kind, obj)
    assert got.status == "Progressing" and "generation 3" in got.message


@pytest.mark.parametrize("kind", argocd.KINDS)
def test_no_status_yet_is_progressing(kind: str) -> None:
    assert argocd.health(kind, {"metadata": {"name": "x"}}).status == "Progressing"


def test_an_unknown_phase_is_unknown_not_healthy() -> None:
    assert argocd.health("AgentSession", {"status": {"phase": "Hibernating"}}).status == "Unknown"


def _argocd_cm() -> dict[str, Any]:
    blocks = re.findall(r"```yaml\n(.*?)```", OPERATIONS.read_text(), re.S)
    (config_map,) = [
        d
        for b in blocks
        for d in yaml.safe_load_all(b)
        if d and d.get("kind") == "ConfigMap" and d["metadata"]["name"] == "argocd-cm"
    ]
    return dict(config_map)


@pytest.mark.parametrize("kind", argocd.KINDS)
def test_the_argocd_cm_snippet_in_the_docs_is_the_shipped_lua(kind: str) -> None:
    data = _argocd_cm()["data"]
    key = f"resource.customizations.health.{argocd.GROUP}_{kind}"
    assert data[key] == argocd.script(kind).read_text(), f"docs/operations.md drifted from {argocd.script(kind)}"
