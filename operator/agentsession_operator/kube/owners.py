"""Whose child is this: the session a claim, a NetworkPolicy or a Sandbox belongs to, by its owner
references (kind and group checked; a Sandbox through its claim). Reads only the cache."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentsession_api import names
from agentsession_operator import constants as c
from agentsession_operator.kube.cache import Key


def _session_ref(body: Mapping[str, Any]) -> Key | None:
    for ref in body["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == names.SESSION_KIND and ref.get("apiVersion", "").startswith(f"{names.GROUP}/"):
            return body["metadata"]["namespace"], ref["name"]
    return None


def session_for_claim(claim: Mapping[str, Any]) -> Key | None:
    return _session_ref(claim)


def session_for_network_policy(body: Mapping[str, Any]) -> Key | None:
    """The session a NetworkPolicy belongs to, by its controller reference."""
    return _session_ref(body)


def session_for_sandbox(claims: Mapping[Key, Mapping[str, Any]], sandbox: Mapping[str, Any]) -> Key | None:
    """The session of the cached claim that owns the Sandbox (None: no such claim is cached)."""
    namespace = sandbox["metadata"]["namespace"]
    for ref in sandbox["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == c.CLAIM_KIND:
            claim = claims.get((namespace, ref["name"]))
            if claim is not None:
                return session_for_claim(claim)
    return None
