"""The SandboxClaim a session wants, and patches toward it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from agentsession_operator.decisions.desired import (
    claim_patch_for_ttl,
    desired_claim,
    identifying_labels,
    sandbox_patch_for_mode,
)
from agentsession_operator.decisions.naming import claim_name
from agentsession_operator.decisions.policy_resolve import resolve
from agentsession_operator.decisions.resolved import Resolved

EXPIRES = datetime(2025, 1, 1, 13, 0, 0, 500000, tzinfo=UTC)


def test_full_claim_shape(make_session: Callable[..., dict[str, Any]]) -> None:
    vct = {
        "metadata": {"name": "work"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    session = make_session(
        labels={"app.kubernetes.io/instance": "argo-thing", "team": "a"},
        spec={
            "warmPoolRef": {"name": "python-pool"},
            "ttl": "2h",
            "env": [{"name": "LANG", "value": "C.UTF-8"}, {"name": "X", "value": "", "containerName": "main"}],
            "volumeClaimTemplates": [vct],
            "labels": {"cost-center": "42"},
            "podLabels": {"sandbox.users.io/team": "a"},
            "podAnnotations": {"note": "hi"},
        },
    )
    claim = desired_claim(session, resolve(session), EXPIRES)
    assert claim["apiVersion"] == "extensions.agents.x-k8s.io/v1beta1"
    assert claim["kind"] == "SandboxClaim"
    meta = claim["metadata"]
    assert meta["name"] == "demo" and meta["namespace"] == "ns"
    assert meta["labels"] == {
        "cost-center": "42",
        "agentsession.dev/session": "demo",
        "agentsession.dev/session-uid": session["metadata"]["uid"],
        "app.kubernetes.io/managed-by": "agentsession-operator",
    }
    assert "team" not in meta["labels"] and "app.kubernetes.io/instance" not in meta["labels"]
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "agentsession.dev/v1alpha1",
            "kind": "AgentSession",
            "name": "demo",
            "uid": session["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert claim["spec"] == {
        "warmPoolRef": {"name": "python-pool"},
        "lifecycle": {"shutdownPolicy": "Retain", "shutdownTime": "2025-01-01T13:00:00Z"},
        "env": [{"name": "LANG", "value": "C.UTF-8"}, {"name": "X", "value": "", "containerName": "main"}],
        "volumeClaimTemplates": [vct],
        "additionalPodMetadata": {"labels": {"sandbox.users.io/team": "a"}, "annotations": {"note": "hi"}},
    }


def test_minimal_claim(make_session: Callable[..., dict[str, Any]]) -> None:
    session = make_session()
    claim = desired_claim(session, resolve(session), None)
    assert claim["spec"] == {"warmPoolRef": {"name": "python-pool"}, "lifecycle": {"shutdownPolicy": "Retain"}}


def test_identifying_labels_win_and_long_names_hash(make_session: Callable[..., dict[str, Any]]) -> None:
    name = "x" * 100
    session = make_session(name=name)
    resolved = Resolved(warm_pool="p", labels={"agentsession.dev/session": "spoof"})
    claim = desired_claim(session, resolved, None)
    label = claim["metadata"]["labels"]["agentsession.dev/session"]
    assert label != "spoof" and len(label) <= 63
    assert claim["metadata"]["name"] == claim_name(name, session["metadata"]["uid"])
    assert identifying_labels(session)["agentsession.dev/session"] == label


def test_policy_defaults_flow_into_claim(make_session: Callable[..., dict[str, Any]]) -> None:
    session = make_session(spec={"podLabels": {"sandbox.users.io/a": "1"}})
    resolved = Resolved(warm_pool="default-pool", labels={"team": "t"}, pod_labels={"sandbox.users.io/a": "1"})
    claim = desired_claim(session, resolved, None)
    assert claim["spec"]["warmPoolRef"] == {"name": "default-pool"}
    assert claim["metadata"]["labels"]["team"] == "t"


def test_claim_needs_a_pool(make_session: Callable[..., dict[str, Any]]) -> None:
    with pytest.raises(ValueError, match="warm pool"):
        desired_claim(make_session(spec={}), Resolved(), None)


@pytest.mark.parametrize(
    ("current", "expires", "patch"),
    [
        ("2025-01-01T13:00:00Z", datetime(2025, 1, 1, 13, 0, tzinfo=UTC), None),
        ("2025-01-01T13:00:00.000Z", datetime(2025, 1, 1, 13, 0, 0, 900, tzinfo=UTC), None),
        ("2025-01-01T14:00:00+01:00", datetime(2025, 1, 1, 13, 0, tzinfo=UTC), None),
        (
            "2025-01-01T13:00:00Z",
            datetime(2025, 1, 1, 15, 0, tzinfo=UTC),
            {"spec": {"lifecycle": {"shutdownTime": "2025-01-01T15:00:00Z"}}},
        ),
        (
            None,
            datetime(2025, 1, 1, 15, 0, tzinfo=UTC),
            {"spec": {"lifecycle": {"shutdownTime": "2025-01-01T15:00:00Z"}}},
        ),
        ("2025-01-01T13:00:00Z", None, {"spec": {"lifecycle": {"shutdownTime": None}}}),
        (None, None, None),
    ],
)
def test_claim_patch_for_ttl(
    make_claim: Callable[..., dict[str, Any]], current: str | None, expires: datetime | None, patch: Any
) -> None:
    assert claim_patch_for_ttl(make_claim(shutdown_time=current), expires) == patch


def test_sandbox_patch_for_mode(make_sandbox: Callable[..., dict[str, Any]]) -> None:
    assert sandbox_patch_for_mode(make_sandbox(), "Running") is None
    assert sandbox_patch_for_mode(make_sandbox(mode="Running"), "Suspended") == {"spec": {"operatingMode": "Suspended"}}
    assert sandbox_patch_for_mode(make_sandbox(mode="Suspended"), "Suspended") is None


def _with_suspended_condition(sandbox: dict[str, Any], status: str, reason: str) -> dict[str, Any]:
    sandbox.setdefault("status", {})["conditions"] = [{"type": "Suspended", "status": status, "reason": reason}]
    return sandbox


def test_resume_waits_until_the_suspension_has_settled(make_sandbox: Callable[..., dict[str, Any]]) -> None:
    """Found on the real node: resuming while the old Pod still terminated made agent-sandbox report that
    Pod's PodSucceeded as the resumed Sandbox's (a terminal reason), and the session Failed; resuming before
    agent-sandbox had acted on the suspension left the session on the old Pod."""
    running = {"spec": {"operatingMode": "Running"}}
    not_yet = make_sandbox(mode="Suspended")
    assert sandbox_patch_for_mode(not_yet, "Running") is None  # no Suspended condition yet
    stale = _with_suspended_condition(make_sandbox(mode="Suspended"), "False", "NotSuspended")
    stale["metadata"]["generation"] = 3
    stale["status"]["conditions"][0]["observedGeneration"] = 2
    assert sandbox_patch_for_mode(stale, "Running") is None  # agent-sandbox has not seen the suspension
    terminating = _with_suspended_condition(make_sandbox(mode="Suspended"), "False", "PodTerminating")
    assert sandbox_patch_for_mode(terminating, "Running") is None
    gone = _with_suspended_condition(make_sandbox(mode="Suspended"), "True", "PodTerminated")
    assert sandbox_patch_for_mode(gone, "Running") == running
    unknown = _with_suspended_condition(make_sandbox(mode="Suspended"), "Unknown", "PodStateUnknown")
    unknown["metadata"]["generation"] = 3
    unknown["status"]["conditions"][0]["observedGeneration"] = 3
    assert sandbox_patch_for_mode(unknown, "Running") == running  # acted on, nothing terminating: go


def test_the_claim_never_carries_the_restore_annotation(make_session: Any) -> None:
    """Issue 33 backstop: whatever the spec says, only a hibernated session's wake names a checkpoint."""
    from agentsession_api import names
    from agentsession_operator.decisions.desired import desired_claim
    from agentsession_operator.decisions.resolved import Resolved

    session = make_session(spec={"podAnnotations": {names.ANNOTATION_RESTORE_FROM: "victim", "example.com/a": "b"}})
    claim = desired_claim(session, Resolved(warm_pool="p"), None)
    assert claim["spec"]["additionalPodMetadata"]["annotations"] == {"example.com/a": "b"}
