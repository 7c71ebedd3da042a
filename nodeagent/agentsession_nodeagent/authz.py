"""Who may call the node agent, pure: the operator's ServiceAccount, by a TokenReview bound to an audience."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentsession_api.node_agent import AUDIENCE, audience_for

__all__ = ["AUDIENCE", "AuthzResult", "audience_for", "bearer_token", "judge", "token_review"]


@dataclass(frozen=True)
class AuthzResult:
    allowed: bool
    why: str


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, None when absent or malformed."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return None
    return token


def token_review(token: str, audience: str = AUDIENCE) -> dict[str, Any]:
    """The TokenReview the agent posts for a caller's token, bound to its audience."""
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token, "audiences": [audience]},
    }


def judge(review: dict[str, Any], allowed_user: str, audience: str = AUDIENCE) -> AuthzResult:
    """The API server's answer to ``token_review`` judged: only ``allowed_user``, for ``audience``."""
    status = review.get("status") or {}
    if not status.get("authenticated"):
        return AuthzResult(False, f"not authenticated: {status.get('error') or 'token refused'}")
    if audience not in (status.get("audiences") or []):
        return AuthzResult(False, f"token not bound to audience {audience}")
    user = (status.get("user") or {}).get("username")
    if user != allowed_user:
        return AuthzResult(False, f"{user} is not {allowed_user}")
    return AuthzResult(True, user)
