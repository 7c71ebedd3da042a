"""Desired child objects and patches: the SandboxClaim a session wants, and how to move a live one there.

Labels on the claim are the session's ``spec.labels`` (plus policy defaults) and our identifying labels,
never the session's own ``metadata.labels``: those belong to whoever manages the session (GitOps tools,
selectors) and copying them would leak them into agent-sandbox's objects (kopf.adopt() would do that).
Pod labels go only through ``additionalPodMetadata``, which agent-sandbox checks against its allowlist.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agentsession_api import names
from agentsession_api.timestamps import format_time, parse_time
from agentsession_api.views import Claim, Sandbox, Session
from agentsession_api.views_generated import AgentSessionSpecView
from agentsession_operator import constants
from agentsession_operator.decisions import naming
from agentsession_operator.decisions.ownership import session_owner_reference
from agentsession_operator.decisions.resolved import Resolved

SHUTDOWN_POLICY = "Retain"
"""Retain: at shutdownTime agent-sandbox removes the Sandbox but keeps the claim, so the session can still
read the claim's final status; the operator deletes the claim itself."""


def identifying_labels(session: Mapping[str, Any]) -> dict[str, str]:
    """Labels that tie a child to its session (they win over user labels with the same key)."""
    view = Session(session)
    return {
        names.LABEL_SESSION: naming.label_value(view.name),
        names.LABEL_SESSION_UID: view.uid,
        constants.LABEL_MANAGED_BY: constants.MANAGED_BY,
    }


def _clean(value: Any) -> Any:
    """Drop None values and empty maps/lists recursively, so manifests carry only what was set."""
    if isinstance(value, dict):
        cleaned = {k: _clean(v) for k, v in value.items() if v is not None}
        return {k: v for k, v in cleaned.items() if v not in ({}, [])}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _env(spec: AgentSessionSpecView) -> list[dict[str, Any]]:
    return [{"name": e.name, "value": e.value or "", "containerName": e.container_name} for e in spec.env]


def desired_claim(session: Mapping[str, Any], resolved: Resolved, expires_at: datetime | None) -> dict[str, Any]:
    """The SandboxClaim manifest for ``session`` (extensions.agents.x-k8s.io/v1beta1)."""
    if not resolved.warm_pool:
        raise ValueError("a SandboxClaim needs a warm pool: spec.warmPoolRef or a policy default")
    view = Session(session)
    spec = view.spec_view
    lifecycle: dict[str, Any] = {"shutdownPolicy": SHUTDOWN_POLICY}
    if expires_at is not None:
        lifecycle["shutdownTime"] = format_time(expires_at)
    claim_spec = {
        "warmPoolRef": {"name": resolved.warm_pool},
        "lifecycle": lifecycle,
        "env": _env(spec),
        "volumeClaimTemplates": view.spec.get("volumeClaimTemplates"),  # as written: copied whole
        "additionalPodMetadata": {
            "labels": dict(resolved.pod_labels),
            # Never the restore annotation (policy_violations.violations refuses such a session; this is the backstop):
            # only a hibernated session's wake sets it, on the Sandbox (decisions/hibernate.py).
            "annotations": {
                k: v for k, v in (spec.pod_annotations or {}).items() if k != names.ANNOTATION_RESTORE_FROM
            },
        },
    }
    return {
        "apiVersion": constants.EXTENSIONS_API_VERSION,
        "kind": constants.CLAIM_KIND,
        "metadata": {
            "name": naming.claim_name(view.name, view.uid),
            "namespace": view.namespace,
            "labels": {**resolved.labels, **identifying_labels(session)},
            "ownerReferences": [session_owner_reference(session)],
        },
        "spec": _clean(claim_spec),
    }


def claim_patch_for_ttl(claim: Mapping[str, Any], expires_at: datetime | None) -> dict[str, Any] | None:
    """Merge patch moving the claim's shutdownTime to ``expires_at`` (None: remove it); None when in place."""
    current = parse_time(Claim(claim).shutdown_time)
    wanted = parse_time(format_time(expires_at)) if expires_at is not None else None
    if current == wanted:
        return None
    return {"spec": {"lifecycle": {"shutdownTime": format_time(expires_at) if expires_at is not None else None}}}


def sandbox_operating_mode(sandbox: Mapping[str, Any] | None) -> str:
    """The Sandbox's spec.operatingMode (Running when unset)."""
    return Sandbox(sandbox).operating_mode or constants.OPERATING_MODE_RUNNING


def suspension_settled(sandbox: Mapping[str, Any]) -> bool:
    """agent-sandbox has acted on the suspension and no old Pod is left terminating.

    Settled: its Suspended condition is True (the Pod is gone), or it has observed the Sandbox's current
    generation and reports anything but a Pod still terminating (say, its state unknown).
    """
    view = Sandbox(sandbox)
    cond = view.condition(constants.SANDBOX_COND_SUSPENDED)
    if not cond:
        return False
    if cond.status == "True":
        return True
    observed, generation = cond.observed_generation, view.generation
    current = generation is None or (observed is not None and observed >= generation)
    return current and cond.reason not in constants.SANDBOX_POD_STILL_TERMINATING


def sandbox_patch_for_mode(sandbox: Mapping[str, Any], mode: str) -> dict[str, Any] | None:
    """Merge patch setting the Sandbox's operatingMode (the claim has none: suspend goes to the Sandbox).

    A resume waits until the suspension has settled: resumed while agent-sandbox has not yet acted on it,
    or while the old Pod is still terminating, agent-sandbox reports the old Pod (its IP, then its final
    phase: PodSucceeded when the runtime exits cleanly on SIGTERM, a terminal reason) as the resumed
    Sandbox's. The Sandbox's status change starts the next pass.
    """
    current = sandbox_operating_mode(sandbox)
    if current == mode:
        return None
    if mode == constants.OPERATING_MODE_RUNNING and not suspension_settled(sandbox):
        return None
    return {"spec": {"operatingMode": mode}}
