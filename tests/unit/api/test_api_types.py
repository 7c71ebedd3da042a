"""The pydantic models: camelCase API, unknown fields refused, values checked like admission does."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from agentsession_api.types import (
    AgentSession,
    AgentSessionPolicy,
    AgentSessionPolicySpec,
    AgentSessionSpec,
    AgentSessionStatus,
)

FULL_SPEC: dict[str, Any] = {
    "warmPoolRef": {"name": "python-pool"},
    "ttl": "2h",
    "idleTimeout": "15m",
    "idleAction": "Suspend",
    "env": [{"name": "LANG", "value": "C.UTF-8", "containerName": "main"}],
    "volumeClaimTemplates": [
        {
            "metadata": {"name": "work", "labels": {"a": "b"}},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": "standard",
                "volumeMode": "Filesystem",
            },
        }
    ],
    "labels": {"team": "a"},
    "podLabels": {"sandbox.users.io/team": "a"},
    "podAnnotations": {"note": "x"},
    "suspend": True,
}


def test_full_spec_round_trips_by_alias() -> None:
    spec = AgentSessionSpec.model_validate(FULL_SPEC)
    assert spec.warm_pool_ref is not None and spec.warm_pool_ref.name == "python-pool"
    assert spec.idle_timeout == "15m"
    assert spec.env is not None and spec.env[0].container_name == "main"
    assert spec.model_dump(by_alias=True, exclude_none=True) == FULL_SPEC


def test_empty_spec_defaults() -> None:
    spec = AgentSessionSpec.model_validate({})
    assert spec.suspend is False
    assert spec.idle_action is None  # unset: a policy default may still apply
    assert spec.env is None


def test_populate_by_name() -> None:
    spec = AgentSessionSpec.model_validate({"idle_timeout": "5m"})
    assert spec.idle_timeout == "5m"


@pytest.mark.parametrize(
    "bad",
    [
        {"warmPool": "x"},
        {"ttl": "2d"},
        {"ttl": "0s"},
        {"idleTimeout": "-5m"},
        {"idleAction": "Stop"},
        {"env": [{"name": "1BAD", "value": "x"}]},
        {"env": [{"name": "A", "value": "x", "extra": 1}]},
        {"warmPoolRef": {"name": "Bad_Name"}},
        {
            "volumeClaimTemplates": [
                {"metadata": {"name": "w"}, "spec": {"resources": {"requests": {"storage": "1GB"}}}}
            ]
        },
        {
            "volumeClaimTemplates": [
                {"metadata": {"name": "w"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}, "x": 1}}
            ]
        },
        {"labels": {"a": "x" * 64}},
        {"labels": {"bad key": "x"}},
        {"labels": {f"k{i}": "v" for i in range(33)}},
        {"podLabels": {"Example.com/x": "y"}},
        {"podAnnotations": {"bad key": "x"}},
        {"podAnnotations": {"a": "x" * 5000}},
    ],
)
def test_invalid_specs_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        AgentSessionSpec.model_validate(bad)


def test_status_parses_and_ignores_unknown_fields() -> None:
    status = AgentSessionStatus.model_validate(
        {
            "phase": "Ready",
            "podIPs": ["127.1.0.5"],
            "serviceFQDN": "demo.ns.svc.cluster.local",
            "expiresAt": "2025-01-01T13:00:00Z",
            "lastActivityTime": "2025-01-01T12:00:00Z",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "SandboxReady",
                    "lastTransitionTime": "2025-01-01T12:00:00Z",
                }
            ],
            "kopf": {"progress": {}},
        }
    )
    assert status.pod_ips == ["127.1.0.5"]
    assert status.service_fqdn == "demo.ns.svc.cluster.local"
    assert status.expires_at is not None and status.expires_at.hour == 13
    assert status.conditions is not None and status.conditions[0].message == ""


def test_whole_objects() -> None:
    session = AgentSession.model_validate(
        {"apiVersion": "agentsession.dev/v1alpha1", "kind": "AgentSession", "metadata": {"name": "x"}, "spec": {}}
    )
    assert session.spec.suspend is False
    policy = AgentSessionPolicy.model_validate({"metadata": {"name": "p"}})
    assert policy.spec.limits is None


def test_policy_spec() -> None:
    spec = AgentSessionPolicySpec.model_validate(
        {
            "selector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]},
            "defaults": {"ttl": "1h", "idleAction": "Suspend"},
            "limits": {"maxTtl": "2h", "maxStorage": "10Gi", "env": {"deny": ["AWS_*"]}, "allowedWarmPools": ["p"]},
            "labels": {"required": ["team"], "allowedPrefixes": ["team.example.com/"], "values": {"team": "^[a-z]+$"}},
            "cleanup": {"deleteFinishedAfter": "24h", "maxSessionsPerLabel": {"key": "team", "max": 20}},
        }
    )
    assert spec.limits is not None and spec.limits.max_storage == "10Gi"
    assert spec.labels is not None and spec.labels.allowed_prefixes == ["team.example.com/"]
    with pytest.raises(ValidationError):
        AgentSessionPolicySpec.model_validate({"limits": {"maxStorage": "lots"}})
    with pytest.raises(ValidationError):
        AgentSessionPolicySpec.model_validate({"cleanup": {"maxSessionsPerLabel": {"key": "team", "max": 0}}})
