"""An old AgentSession CRD: the API server drops the fields it lacks, so the operator refuses to start.

The old CRD here is today's without its schema revision (as every CRD before revisions) and without
spec.limits.allowedStorageClasses. First the danger, on the real API server: a policy's limit vanishes
without an error (a warning header, for a client that does not ask for strict field
validation). Then the operator's answer: it exits at once with one paragraph naming the fix.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentsession_api import names
from tests.e2e.conftest import Kube

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
POLICY_CRD = CRDS / f"{names.GROUP}_{names.POLICY_PLURAL}.yaml"


def old_policy_crd() -> dict[str, Any]:
    crd = yaml.safe_load(POLICY_CRD.read_text())
    crd["metadata"]["annotations"].pop(names.ANNOTATION_SCHEMA_REVISION)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["properties"]["limits"]["properties"].pop("allowedStorageClasses")
    return dict(crd)


@pytest.fixture
def old_crd(kube: Kube) -> Iterator[None]:
    kube.run("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump(old_policy_crd()))
    try:
        yield
    finally:  # the other tests need today's CRDs back
        kube.run("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))


def test_an_old_crd_drops_a_limit_and_the_operator_refuses_to_start(kube: Kube, namespace: str, old_crd: None) -> None:
    def limits_kept() -> Any:
        policy = {
            "apiVersion": names.API_VERSION,
            "kind": names.POLICY_KIND,
            "metadata": {"name": "storage"},
            "spec": {"limits": {"maxTtl": "1h", "allowedStorageClasses": ["fast"]}},
        }
        # fieldValidation=Warn: the API server's default for clients that do not ask for Strict (client
        # libraries, controllers); kubectl asks for Strict and would be refused instead.
        kube.run("apply", "--validate=warn", "-n", namespace, "-f", "-", input=yaml.safe_dump(policy))
        return (kube.get("agentsessionpolicy", "storage", namespace) or {}).get("spec", {}).get("limits")

    # The danger: accepted, and the limit is gone (the API server's pruning: a warning at most).
    kept = kube.wait_for(
        "the old schema in force", lambda: (k := limits_kept()) and "allowedStorageClasses" not in k and k
    )
    assert kept == {"maxTtl": "1h"}

    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentsession_operator",
            "--metrics-port",
            "0",
            "--health-port",
            "0",
            "--webhook-port",
            "0",
            "--no-leader-elect",
            "--log-format",
            "console",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, KUBECONFIG=kube.kubeconfig),
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("agentsession-operator cannot start: the installed AgentSession CRDs are older"), last
    assert f"CRD {names.POLICY_PLURAL}.{names.GROUP} has schema revision 0, this operator needs" in last
    assert "kubectl apply --server-side --force-conflicts -f crds/" in last
    assert elapsed < 30, elapsed
