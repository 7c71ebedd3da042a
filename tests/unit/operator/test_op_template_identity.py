"""Condition PodIdentity (issue 51 item 1): a template without the identity volume gives sessions whose pods
every default client refuses; the session says so, naming the fix, instead of a client's UnverifiedPod."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from agentsession_api import phases
from agentsession_operator.decisions import template_identity
from agentsession_operator.decisions.actions import reconcile_actions
from agentsession_operator.kube.cache import Cache
from testkit import manifests
from tests.unit.operator.test_op_actions import ready_claim, status_of

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
Make = Callable[..., dict[str, Any]]
RUNTIME = "ghcr.io/agentsession/runtime:test"


def _identity_condition(actions: list[Any]) -> dict[str, Any] | None:
    conditions = status_of(actions).get("conditions") or []
    return next((c for c in conditions if c["type"] == phases.COND_POD_IDENTITY), None)


def test_a_template_with_the_volume_mounted_everywhere_gives_pods_their_identity() -> None:
    assert template_identity.mounts_identity(manifests.template("t", RUNTIME))
    assert not template_identity.mounts_identity(manifests.template("t", RUNTIME, pod_identity=False))
    assert not template_identity.mounts_identity(None)


@pytest.mark.parametrize("breaks", ["audience", "mount path", "a second container without it"])
def test_a_volume_that_is_not_the_contracts_gives_no_identity(breaks: str) -> None:
    template = copy.deepcopy(manifests.template("t", RUNTIME))
    pod = template["spec"]["podTemplate"]["spec"]
    if breaks == "audience":
        pod["volumes"][-1]["projected"]["sources"][0]["serviceAccountToken"]["audience"] = "https://kubernetes"
    elif breaks == "mount path":
        pod["containers"][0]["volumeMounts"][-1] = {**pod["containers"][0]["volumeMounts"][-1], "mountPath": "/x"}
    else:
        pod["containers"].append({"name": "helper", "image": RUNTIME})
    assert not template_identity.mounts_identity(template)


def test_the_cache_keeps_the_verdict_not_the_pod_template() -> None:
    cache = Cache()
    cache.remember_pool(("ns", "pool"), manifests.warm_pool("pool", "bare", 0))
    cache.remember_template(("ns", "bare"), manifests.template("bare", RUNTIME, pod_identity=False))
    assert "podTemplate" not in cache.templates[("ns", "bare")]["spec"]
    assert cache.template_identity_of_pool(("ns", "pool")) == template_identity.TemplateIdentity("bare", False)
    assert cache.template_identity_of_pool(("ns", "other")) is None


def test_the_session_says_whether_its_pods_prove_who_they_are(make_session: Make, make_claim: Make) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "p"}})
    missing = reconcile_actions(
        session, ready_claim(make_claim), None, T0, identity=template_identity.TemplateIdentity("bare", False)
    )
    condition = _identity_condition(missing)
    assert condition is not None and condition["status"] == "False", condition
    assert condition["reason"] == template_identity.REASON_MISSING
    assert "SandboxTemplate bare has no agentsession-pod-identity volume" in condition["message"]
    assert "pod_identity='address'" in condition["message"]
    mounted = reconcile_actions(
        session, ready_claim(make_claim), None, T0, identity=template_identity.TemplateIdentity("full", True)
    )
    assert (_identity_condition(mounted) or {}).get("status") == "True"
    # Not known (no claim yet, or its template unseen): no condition at all, rather than a guess.
    assert _identity_condition(reconcile_actions(session, ready_claim(make_claim), None, T0)) is None
