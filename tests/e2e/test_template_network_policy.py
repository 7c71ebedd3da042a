"""Issue 28 item 9, the template's half: NetworkPolicies add up, so the SandboxTemplate's own (managed) one can
open what the session's policy closes.

agent-sandbox gives every SandboxTemplate with ``networkPolicyManagement: Managed`` (its default) one shared
NetworkPolicy selecting the template's pods: its own rules, or with ``networkPolicy`` omitted a default that
admits the sandbox router and allows egress to the public internet. Either way it selects the session's Pod
beside the session's own policy, and the union of the two is what the network enforces.

Attack: a template whose managed policy admits every namespace. Before: the session said NetworkIsolated=True
while tenant B's pod reached its sandbox. Now: NetworkIsolated=False, reason TemplatePolicyWider, naming the
template and what to set.
"""

from __future__ import annotations

from typing import Any

import pytest

from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess
from tests.e2e.test_network_isolation import CLIENT, RUNTIME_PORT, _answers_soon, _ready_session, tenant_b
from tests.e2e.test_real_node import _pod, _running

pytestmark = pytest.mark.e2e
__all__ = ["tenant_b"]  # the fixture, used by name

OPEN_TO_ALL = {"ingress": [{"from": [{"namespaceSelector": {}}]}], "egress": []}


def _managed(template: dict[str, Any], network_policy: dict[str, Any] | None) -> dict[str, Any]:
    """The template with agent-sandbox's managed policy: its own rules, or (None) agent-sandbox's default."""
    template["spec"]["networkPolicyManagement"] = "Managed"
    if network_policy is not None:
        template["spec"]["networkPolicy"] = network_policy
    return template


def _isolated(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    def settled() -> dict[str, Any] | None:
        body = kube.get("agentsession", name, namespace)
        condition = kube.condition(body, "NetworkIsolated")
        return condition if condition and (body or {}).get("status", {}).get("phase") == "Ready" else None

    return dict(kube.wait_for(f"session {name} Ready with NetworkIsolated", settled, timeout=120, interval=0.5))


@pytest.mark.kwoknode(
    reason="the condition's logic (the real node: test_tenant_b_through_a_wide_template_policy_is_not_hidden)"
)
@pytest.mark.parametrize(
    ("network_policy", "status"),
    [
        pytest.param(None, "False", id="agent-sandbox-default"),
        pytest.param(OPEN_TO_ALL, "False", id="open-ingress"),
        pytest.param({}, "True", id="closed"),
    ],
)
def test_a_managed_template_policy_wider_than_the_sessions_is_reported(
    kube: Kube, namespace: str, operator: OperatorProcess, network_policy: dict[str, Any] | None, status: str
) -> None:
    kube.apply(
        _managed(manifests.template("py"), network_policy), manifests.warm_pool("pool", "py"), namespace=namespace
    )
    kube.apply(manifests.session("s1", "pool"), namespace=namespace)
    condition = _isolated(kube, namespace, "s1")
    assert condition["status"] == status, condition
    if status == "False":
        assert condition["reason"] == "TemplatePolicyWider", condition
        assert "SandboxTemplate py" in condition["message"] and "networkPolicy: {}" in condition["message"]


@pytest.mark.kwoknode(
    reason="the condition's logic (the real node: test_tenant_b_through_a_wide_template_policy_is_not_hidden)"
)
def test_an_unmanaged_template_leaves_the_session_isolated(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(manifests.template("py"), manifests.warm_pool("pool", "py"), namespace=namespace)
    kube.apply(manifests.session("s1", "pool"), namespace=namespace)
    assert _isolated(kube, namespace, "s1")["status"] == "True"


@pytest.mark.realnode
def test_tenant_b_through_a_wide_template_policy_is_not_hidden(
    kube: Kube, namespace: str, tenant_b: str, operator: OperatorProcess
) -> None:
    """On the real node (kube-router enforces): the template's policy really lets tenant B in, and the
    session says so instead of NetworkIsolated=True."""
    template = _managed(manifests.template("py", manifests.PYTHON_RUNTIME_IMAGE), OPEN_TO_ALL)
    kube.apply(template, manifests.warm_pool("pool", "py"), namespace=namespace)
    kube.apply(manifests.session("s1", "pool"), namespace=namespace)
    kube.apply(_pod("intruder", ["sleep", "600"], labels=CLIENT), namespace=tenant_b)
    session = _ready_session(kube, namespace, "s1")
    _running(kube, "intruder", tenant_b)
    url = f"http://{session['status']['podIPs'][0]}:{RUNTIME_PORT}/"
    assert _answers_soon(kube, tenant_b, "intruder", url) == "ok 200", "the template's policy did not widen"
    condition = _isolated(kube, namespace, "s1")
    assert (condition["status"], condition["reason"]) == ("False", "TemplatePolicyWider"), condition
