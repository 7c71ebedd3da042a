"""kube/owners.py: a child is a session's only through an owner reference of the right kind and group."""

from __future__ import annotations

from typing import Any

from agentsession_operator.kube import owners


def _child(refs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "c", "ownerReferences": refs}}


SESSION_REF = {"kind": "AgentSession", "apiVersion": "agentsession.dev/v1alpha1", "name": "demo", "uid": "u"}


def test_a_claim_names_its_session_by_kind_and_group() -> None:
    assert owners.session_for_claim(_child([SESSION_REF])) == ("ns", "demo")
    assert owners.session_for_claim(_child([{**SESSION_REF, "apiVersion": "evil.example/v1"}])) is None
    assert owners.session_for_claim(_child([{**SESSION_REF, "kind": "ConfigMap"}])) is None
    assert owners.session_for_network_policy(_child([SESSION_REF])) == ("ns", "demo")


def test_a_sandbox_belongs_to_the_session_of_its_cached_claim() -> None:
    claims = {("ns", "claim-1"): _child([SESSION_REF])}
    sandbox = _child([{"kind": "SandboxClaim", "name": "claim-1"}])
    assert owners.session_for_sandbox(claims, sandbox) == ("ns", "demo")
    assert owners.session_for_sandbox({}, sandbox) is None  # its claim is not cached: nobody's yet
