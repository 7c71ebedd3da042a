"""Condition PodIdentity (issue 51 item 1), against the real API server and agent-sandbox: a session whose
template gives its pods the identity token says True; one whose template lacks it says False, naming the
template, the volume and the fixes (the clients would refuse its pods with UnverifiedPod)."""

from __future__ import annotations

from typing import Any

import pytest

from agentsession_api import phases
from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = pytest.mark.e2e


def _identity(kube: Kube, name: str, namespace: str) -> dict[str, Any] | None:
    return kube.condition(kube.get("agentsession", name, namespace), phases.COND_POD_IDENTITY)


def test_a_session_says_whether_its_template_gives_pods_their_identity(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(
        manifests.template("proven", manifests.PYTHON_RUNTIME_IMAGE),
        manifests.warm_pool("proven", "proven", 0),
        manifests.template("bare", manifests.PYTHON_RUNTIME_IMAGE, pod_identity=False),
        manifests.warm_pool("bare", "bare", 0),
        namespace=namespace,
    )
    kube.apply(manifests.session("with", "proven"), manifests.session("without", "bare"), namespace=namespace)
    proven = kube.wait_for("PodIdentity on the session with the volume", lambda: _identity(kube, "with", namespace), 90)
    assert proven["status"] == "True", proven
    bare = kube.wait_for("PodIdentity on the session without", lambda: _identity(kube, "without", namespace), 90)
    assert bare["status"] == "False" and bare["reason"] == "NoIdentityVolume", bare
    assert "SandboxTemplate bare has no agentsession-pod-identity volume" in bare["message"], bare
