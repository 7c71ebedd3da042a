"""The shipped Argo CD health checks on objects the real operator wrote, in each phase (issue 27).

Every case is driven into its phase on the local cluster, then health.lua runs on the live object with
Lua 5.1 and must give the expected Argo CD status. With ``AGENTSESSION_CAPTURE_ARGOCD=1`` the objects
are also written to the checks' testdata/ and health_test.yaml (Argo CD's own layout), which the unit test
tests/unit/shipped/test_argocd_health.py replays without a cluster.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess
from tests.opskit import argocd

pytestmark = pytest.mark.e2e

CAPTURE = os.environ.get("AGENTSESSION_CAPTURE_ARGOCD") == "1"
# Fields that differ on every run and say nothing about health.
VOLATILE_METADATA = ("managedFields", "uid", "resourceVersion", "creationTimestamp", "namespace", "annotations")


WORKSPACE = {
    "metadata": {"name": "workspace"},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    expected: str


def clean(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k not in VOLATILE_METADATA}
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": meta,
        "spec": obj.get("spec") or {},
        "status": obj.get("status") or {},
    }


def _phase(kube: Kube, name: str, namespace: str, phase: str, reason: str | None = None) -> Callable[[], Any]:
    def check() -> Any:
        s = kube.get("agentsession", name, namespace)
        status = (s or {}).get("status") or {}
        if status.get("phase") != phase:
            return None
        if reason and not any(c.get("reason") == reason for c in status.get("conditions") or []):
            return None
        return s

    return check


def _policy_valid(kube: Kube, name: str, namespace: str, valid: str) -> Callable[[], Any]:
    def check() -> Any:
        p = kube.get("agentsessionpolicy", name, namespace) or {}
        conds = (p.get("status") or {}).get("conditions") or []
        return p if any(c.get("type") == "Valid" and c.get("status") == valid for c in conds) else None

    return check


def test_health_of_live_sessions_and_policies(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    kube.apply(
        manifests.template("pause"),
        manifests.warm_pool("pool", "pause", 0),
        # The python runtime answers 404 on this path: its sandbox never gets ready (Provisioning for good).
        manifests.template("unready", manifests.PYTHON_RUNTIME_IMAGE, readiness_path="/no-such-path"),
        manifests.warm_pool("unready-pool", "unready", 0),
        namespace=namespace,
    )
    kube.apply(
        manifests.session("ready", "pool", ttl="30m"),
        manifests.session("provisioning", "unready-pool", ttl="30m"),
        manifests.session("suspended", "pool", ttl="30m", suspend=True),
        manifests.session("expired", "pool", ttl="3s"),
        # A fork's source that never gets Ready (no such pool): the fork waits, then the source goes.
        manifests.session("failed-source", "no-such-pool", volumeClaimTemplates=[WORKSPACE]),
        namespace=namespace,
    )
    kube.apply(manifests.session("failed", forkFrom={"name": "failed-source"}), namespace=namespace)
    kube.wait_for("the fork waits", _phase(kube, "failed", namespace, "Pending", "SourceNotReady"))
    kube.run("delete", "agentsession", "failed-source", "-n", namespace)
    live: list[tuple[Case, dict[str, Any]]] = []
    for case, waiter in (
        (Case("ready", "AgentSession", "Healthy"), _phase(kube, "ready", namespace, "Ready")),
        (Case("provisioning", "AgentSession", "Progressing"), _phase(kube, "provisioning", namespace, "Provisioning")),
        (Case("suspended", "AgentSession", "Suspended"), _phase(kube, "suspended", namespace, "Suspended")),
        (Case("expired", "AgentSession", "Degraded"), _phase(kube, "expired", namespace, "Expired", "TTLExpired")),
        (Case("failed", "AgentSession", "Degraded"), _phase(kube, "failed", namespace, "Failed", "SourceNotFound")),
    ):
        live.append((case, kube.wait_for(f"session {case.name}", waiter, timeout=90)))

    # Policies last: the invalid one must not change what the sessions above show.
    kube.apply(
        {
            "apiVersion": "agentsession.dev/v1alpha1",
            "kind": "AgentSessionPolicy",
            "metadata": {"name": "valid"},
            "spec": {"limits": {"maxTtl": "24h"}},
        },
        {
            "apiVersion": "agentsession.dev/v1alpha1",
            "kind": "AgentSessionPolicy",
            "metadata": {"name": "invalid"},
            "spec": {"labels": {"values": {"team": "(?=a)a"}}},
        },  # a lookahead: RE2 refuses it
        namespace=namespace,
    )
    for case, waiter in (
        (Case("valid", "AgentSessionPolicy", "Healthy"), _policy_valid(kube, "valid", namespace, "True")),
        (Case("invalid", "AgentSessionPolicy", "Degraded"), _policy_valid(kube, "invalid", namespace, "False")),
    ):
        live.append((case, kube.wait_for(f"policy {case.name}", waiter, timeout=60)))

    for case, obj in live:
        got = argocd.health(case.kind, obj)
        assert got.status == case.expected, (case, got, obj.get("status"))
    if CAPTURE:
        write_testdata([(case, clean(obj)) for case, obj in live])


def write_testdata(captured: list[tuple[Case, dict[str, Any]]]) -> None:
    for kind in argocd.KINDS:
        folder = argocd.script(kind).parent
        tests = []
        for case, obj in captured:
            if case.kind != kind:
                continue
            (folder / "testdata" / f"{case.name}.yaml").write_text(yaml.safe_dump(obj, sort_keys=False))
            got = argocd.health(kind, obj)
            tests.append(
                {
                    "healthStatus": {"status": got.status, "message": got.message},
                    "inputPath": f"testdata/{case.name}.yaml",
                }
            )
        (folder / "health_test.yaml").write_text(yaml.safe_dump({"tests": tests}, sort_keys=False, width=1000))
