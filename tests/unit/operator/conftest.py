"""Builders for the plain dicts the operator's pure logic reads (sessions, claims, Sandboxes, policies).

Exposed as fixtures returning functions, so test modules need no import from this directory (it has no
``__init__.py`` on purpose: a package here would be importable as ``operator`` and shadow the stdlib).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
SESSION_UID = "11111111-2222-3333-4444-555555555555"
CLAIM_UID = "99999999-8888-7777-6666-555555555555"

Obj = dict[str, Any]


def build_session(
    name: str = "demo",
    *,
    spec: Obj | None = None,
    status: Obj | None = None,
    labels: dict[str, str] | None = None,
    created: str = "2025-01-01T11:00:00Z",
    uid: str = SESSION_UID,
    generation: int = 1,
    namespace: str = "ns",
    deleting: bool = False,
) -> Obj:
    meta: Obj = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "generation": generation,
        "creationTimestamp": created,
    }
    if labels is not None:
        meta["labels"] = labels
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T12:00:00Z"
    obj: Obj = {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": meta,
        "spec": {"warmPoolRef": {"name": "python-pool"}} if spec is None else spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def build_claim(
    name: str = "demo",
    *,
    owner_uid: str | None = SESSION_UID,
    uid: str = CLAIM_UID,
    sandbox_name: str | None = None,
    ready: tuple[str, str, str] | None = None,
    pod_ips: list[str] | None = None,
    fqdn: str | None = None,
    shutdown_time: str | None = None,
    deleting: bool = False,
) -> Obj:
    meta: Obj = {"name": name, "namespace": "ns", "uid": uid}
    if owner_uid is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "agentsession.dev/v1alpha1",
                "kind": "AgentSession",
                "name": "demo",
                "uid": owner_uid,
                "controller": True,
            }
        ]
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T12:00:00Z"
    spec: Obj = {"warmPoolRef": {"name": "python-pool"}, "lifecycle": {"shutdownPolicy": "Retain"}}
    if shutdown_time:
        spec["lifecycle"]["shutdownTime"] = shutdown_time
    status: Obj = {}
    if sandbox_name or pod_ips or fqdn:
        status["sandbox"] = {k: v for k, v in (("name", sandbox_name), ("podIPs", pod_ips), ("serviceFQDN", fqdn)) if v}
    if ready is not None:
        status["conditions"] = [
            {
                "type": "Ready",
                "status": ready[0],
                "reason": ready[1],
                "message": ready[2],
                "lastTransitionTime": "2025-01-01T11:30:00Z",
            }
        ]
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": meta,
        "spec": spec,
        "status": status,
    }


def build_sandbox(
    name: str = "demo",
    *,
    owner_uid: str | None = CLAIM_UID,
    mode: str | None = None,
    pod_ips: list[str] | None = None,
    fqdn: str | None = None,
    launch: str | None = None,
    generation: int | None = None,
    ready_generation: int | None = None,
) -> Obj:
    """`generation` and `ready_generation` (the Ready condition's observedGeneration): agent-sandbox acting
    on a spec change, e.g. a warm-pool adoption (generation 2, Ready still the pool's, of generation 1)."""
    meta: Obj = {"name": name, "namespace": "ns", "uid": "sandbox-uid"}
    if generation is not None:
        meta["generation"] = generation
    if owner_uid is not None:
        meta["ownerReferences"] = [{"kind": "SandboxClaim", "name": "demo", "uid": owner_uid, "controller": True}]
    if launch is not None:
        meta["labels"] = {"agents.x-k8s.io/launch-type": launch}
    spec: Obj = {"podTemplate": {}}
    if mode is not None:
        spec["operatingMode"] = mode
    status: Obj = {}
    if pod_ips:
        status["podIPs"] = pod_ips
    if fqdn:
        status["serviceFQDN"] = fqdn
    if ready_generation is not None:
        status["conditions"] = [
            {"type": "Ready", "status": "True", "reason": "DependenciesReady", "observedGeneration": ready_generation}
        ]
    return {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": meta,
        "spec": spec,
        "status": status,
    }


def build_policy(name: str, spec: Obj | None = None, *, namespace: str = "ns") -> Obj:
    return {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSessionPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec or {},
    }


@pytest.fixture
def now() -> datetime:
    return NOW


@pytest.fixture
def make_session() -> Callable[..., Obj]:
    return build_session


@pytest.fixture
def make_claim() -> Callable[..., Obj]:
    return build_claim


@pytest.fixture
def make_sandbox() -> Callable[..., Obj]:
    return build_sandbox


@pytest.fixture
def make_policy() -> Callable[..., Obj]:
    return build_policy


@pytest.fixture
def resolves(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts policy_resolve.resolve calls (a pass resolves the settings in force once, whatever rules read them)."""
    from agentsession_operator.decisions import actions, policy_resolve

    count = [0]
    real = policy_resolve.resolve

    def counting(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(policy_resolve, "resolve", counting)
    monkeypatch.setattr(actions, "resolve", counting)
    return count
