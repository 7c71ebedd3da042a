"""Issue 49 item 2: an AgentSession carries at most 64 labels (every replica keeps them in memory). The API
server bounds each label, not their number, and a CRD cannot validate metadata: the operator's admission
refuses more, saying what to fix (the reconcile backstop is unit-tested on the cached copy)."""

from __future__ import annotations

import json

import pytest

from agentsession_api.types import MAX_SESSION_LABELS
from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = pytest.mark.e2e


def _create(kube: Kube, namespace: str, labels: int) -> str | None:
    body = manifests.session(
        f"labels-{labels}", "no-such-pool", {f"example.com/l{i:03d}": "v" for i in range(labels)}, ttl="10m"
    )
    proc = kube.run("create", "-n", namespace, "-f", "-", input=json.dumps(body), check=False)
    return proc.stderr if proc.returncode != 0 else None


def test_a_session_over_the_label_bound_is_refused_at_admission(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    refused = _create(kube, namespace, MAX_SESSION_LABELS + 1)
    assert refused is not None and f"more than {MAX_SESSION_LABELS} labels" in refused, refused
    assert "move the rest to annotations" in refused
    assert _create(kube, namespace, MAX_SESSION_LABELS) is None
