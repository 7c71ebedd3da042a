"""When the API server refuses one of the operator's writes with a 4xx: say so on the session's status.

Without this, a refused claim create or patch aborted the pass before any status was written, and the
session sat in its old phase with no hint why (issue 12). The pass is still retried with backoff: a
refusal from RBAC, a quota or a webhook can go away.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agentsession_api import phases
from agentsession_operator.decisions.conditions import MAX_MESSAGE, set_condition

REASON_CLAIM_REFUSED = "ClaimRefused"


def is_refusal(status: int | None) -> bool:
    """A 4xx that retrying at once will not fix (409 means "exists" and 429 "slow down": handled elsewhere)."""
    return status is not None and 400 <= status < 500 and status not in (404, 409, 429)


def api_message(body: object) -> str:
    """The API server's own message from a Status body, else the raw body (bounded)."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    try:
        parsed = json.loads(text)
    except ValueError:
        return text[:2000]
    return str(parsed.get("message") or text)[:2000] if isinstance(parsed, dict) else text[:2000]


def refusal_status(
    session: Mapping[str, Any],
    planned: Mapping[str, Any] | None,
    action: str,
    code: int,
    message: str,
    now: datetime,
) -> dict[str, Any]:
    """The status patch: the planned one (if any), with Ready=False ClaimRefused naming the write and the reason."""
    base = dict(planned or {})
    conditions = base.get("conditions") or (session.get("status") or {}).get("conditions") or []
    text = f"the API server refused to {action} the SandboxClaim (HTTP {code}): {message}"[:MAX_MESSAGE]
    generation = (session.get("metadata") or {}).get("generation")
    ready = (phases.COND_READY, False, REASON_CLAIM_REFUSED, text)
    base["conditions"] = set_condition(conditions, *ready, now, generation)
    if not base.get("phase") and not (session.get("status") or {}).get("phase"):
        base["phase"] = phases.Phase.PENDING
    return base
