"""The SandboxTemplate's own NetworkPolicy, judged against the session's (issue 28 item 9), pure.

agent-sandbox gives each template with ``networkPolicyManagement: Managed`` (its default) one shared
NetworkPolicy selecting every pod made from the template, warm-pool pods included: the template's
``networkPolicy`` rules, or with that field omitted agent-sandbox's default (ingress from the sandbox router
in agent-sandbox-system, egress to the public internet). NetworkPolicies add up, so any rule in it opens the
session's Pod beyond what the session's own policy allows. Only a closed one (``networkPolicy: {}``: no
ingress rule, no egress rule) or none at all (``Unmanaged``) leaves the session's policy in charge.

Whether a rule of the template's happens to lie inside the session's own is not worked out: any rule counts
as wider. The fix is the same either way (close the template, let the session's policy open what it needs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

MANAGED: Final = "Managed"
UNMANAGED: Final = "Unmanaged"
KEPT_SPEC: Final = ("networkPolicyManagement", "networkPolicy")
"""The template's spec fields the operator caches (kube/cache.py): this module's inputs, nothing else."""


@dataclass(frozen=True)
class TemplatePolicy:
    """What a template's managed NetworkPolicy opens, counted from the template's spec."""

    template: str
    managed: bool
    default: bool
    """Managed with ``networkPolicy`` omitted: agent-sandbox's default policy."""
    ingress_rules: int = 0
    egress_rules: int = 0


def of_template(template: Mapping[str, Any] | None) -> TemplatePolicy | None:
    """The template's policy, None when the template is not known (deleted: its policy is garbage-collected
    with it, since the template controls it)."""
    if not template:
        return None
    spec = template.get("spec") or {}
    name = str((template.get("metadata") or {}).get("name") or "")
    managed = (spec.get("networkPolicyManagement") or MANAGED) != UNMANAGED
    rules = spec.get("networkPolicy")
    if not isinstance(rules, Mapping):
        return TemplatePolicy(name, managed, default=managed)
    return TemplatePolicy(
        name,
        managed,
        default=False,
        ingress_rules=len(rules.get("ingress") or ()),
        egress_rules=len(rules.get("egress") or ()),
    )


def wider(policy: TemplatePolicy | None) -> str | None:
    """What the template's policy opens beyond the session's, for the NetworkIsolated message; None: nothing."""
    if policy is None or not policy.managed:
        return None
    if policy.default:
        opens = (
            "agent-sandbox's default for a Managed template without networkPolicy: ingress from the sandbox "
            "router, egress to the public internet"
        )
    elif policy.ingress_rules or policy.egress_rules:
        opens = f"{policy.ingress_rules} ingress and {policy.egress_rules} egress rule(s) of its own"
    else:
        return None
    return (
        f"SandboxTemplate {policy.template}'s managed NetworkPolicy also selects this pod, and NetworkPolicies add "
        f"up: it opens {opens}. Set networkPolicy: {{}} (closed) or networkPolicyManagement: Unmanaged in the "
        "template, and let the session's policy (AgentSessionPolicy egress) open what the session needs"
    )
