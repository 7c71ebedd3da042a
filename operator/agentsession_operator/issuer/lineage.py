"""Which Sandbox a session's credentials may name. Pure.

The status names the session's Sandbox, but a status can be written by more than the operator (a client
reports activity), so the name alone proves nothing: the Sandbox counts only when its controller is a
SandboxClaim whose controller is the session itself, by UID (the project's rule for every child).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentsession_api import names
from agentsession_operator import constants as c


@dataclass(frozen=True)
class SessionSandbox:
    name: str
    uid: str


def _controller(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == kind:
            return dict(ref)
    return None


def sandbox_name(session: dict[str, Any]) -> str | None:
    """The Sandbox the session's status names, when the session is live; None otherwise."""
    if (session.get("metadata") or {}).get("deletionTimestamp"):
        return None
    name = (session.get("status") or {}).get("sandboxName")
    return str(name) if name else None


def claim_of(sandbox: dict[str, Any]) -> str | None:
    """The SandboxClaim that controls ``sandbox``, by name."""
    ref = _controller(sandbox, c.CLAIM_KIND)
    return str(ref["name"]) if ref and ref.get("name") else None


def session_sandbox(
    session: dict[str, Any], claim: dict[str, Any] | None, sandbox: dict[str, Any] | None
) -> SessionSandbox | None:
    """The session's own Sandbox, or None when the chain session -> claim -> Sandbox does not hold by UID."""
    if sandbox is None or claim is None or (sandbox.get("metadata") or {}).get("deletionTimestamp"):
        return None
    owner = _controller(claim, names.SESSION_KIND)
    session_uid = (session.get("metadata") or {}).get("uid")
    if owner is None or not session_uid or owner.get("uid") != session_uid:
        return None
    claim_ref = _controller(sandbox, c.CLAIM_KIND)
    if claim_ref is None or claim_ref.get("uid") != (claim.get("metadata") or {}).get("uid"):
        return None
    meta = sandbox.get("metadata") or {}
    return SessionSandbox(str(meta.get("name", "")), str(meta.get("uid", "")))
