"""Issue 28 item 9: the SandboxTemplate's own managed NetworkPolicy adds up with the session's."""

from __future__ import annotations

from typing import Any

import pytest

from agentsession_operator.decisions import network, template_policy
from agentsession_operator.decisions.actions import reconcile_actions
from agentsession_operator.kube.cache import Cache
from tests.unit.operator.test_op_network import SETTINGS, T0, Make, isolated, ready


def _template(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "py", "namespace": "ns", "resourceVersion": "7"}, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "opens"),
    [
        ({}, "agent-sandbox's default"),  # Managed is agent-sandbox's default, networkPolicy omitted
        ({"networkPolicyManagement": "Managed"}, "agent-sandbox's default"),
        ({"networkPolicy": {"ingress": [{"from": [{"namespaceSelector": {}}]}]}}, "1 ingress and 0 egress"),
        ({"networkPolicy": {"egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]}}, "0 ingress and 1 egress"),
        ({"networkPolicy": {}}, None),  # closed: the session's policy is in charge
        ({"networkPolicy": {"ingress": [], "egress": []}}, None),
        ({"networkPolicyManagement": "Unmanaged"}, None),  # agent-sandbox makes none
        ({"networkPolicyManagement": "Unmanaged", "networkPolicy": {"ingress": [{}]}}, None),  # ignored upstream
    ],
)
def test_what_a_template_policy_opens(spec: dict[str, Any], opens: str | None) -> None:
    message = template_policy.wider(template_policy.of_template(_template(**spec)))
    if opens is None:
        assert message is None
    else:
        assert message is not None and opens in message and "SandboxTemplate py" in message, message
        assert "networkPolicy: {}" in message and "Unmanaged" in message  # what to set


def test_an_unknown_template_opens_nothing() -> None:
    """A deleted template's policy goes with it (the template controls it)."""
    assert template_policy.wider(template_policy.of_template(None)) is None


def test_a_wider_template_policy_makes_the_session_not_isolated(
    make_session: Make, make_claim: Make, make_sandbox: Make
) -> None:
    wide = template_policy.of_template(_template())
    actions = reconcile_actions(
        make_session(),
        ready(make_claim),
        make_sandbox(pod_ips=["198.18.0.9"]),
        T0,
        isolation=network.Isolation(SETTINGS, None, wide),
    )
    condition = isolated(actions)
    assert (condition["status"], condition["reason"]) == ("False", "TemplatePolicyWider"), condition
    closed = template_policy.of_template(_template(networkPolicy={}))
    actions = reconcile_actions(
        make_session(),
        ready(make_claim),
        make_sandbox(pod_ips=["198.18.0.9"]),
        T0,
        isolation=network.Isolation(SETTINGS, None, closed),
    )
    assert isolated(actions)["status"] == "True"


def test_the_cache_keeps_a_templates_network_fields_and_follows_its_pool() -> None:
    cache = Cache()
    secret_env = {"containers": [{"name": "c", "env": [{"name": "TOKEN", "value": "s3cret"}]}]}
    cache.remember_template(("ns", "py"), _template(networkPolicy={}, podTemplate={"spec": secret_env}))
    # Nothing else of the template: its pod template only as the verdict on its identity token.
    assert cache.templates[("ns", "py")]["spec"] == {"networkPolicy": {}, "agentsession.dev/podIdentity": False}
    pool = {"metadata": {"resourceVersion": "3"}, "spec": {"sandboxTemplateRef": {"name": "py"}}}
    cache.remember_pool(("ns", "pool"), pool)
    assert cache.template_policy_of_pool(("ns", "pool")) == template_policy.TemplatePolicy("py", True, False)
    assert cache.template_policy_of_pool(("other", "pool")) is None
    cache.forget_pool(("ns", "pool"))
    assert ("ns", "pool") not in cache.pool_templates
