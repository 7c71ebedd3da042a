"""Kubernetes-style conditions whose lastTransitionTime moves only when the status really changes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentsession_api.timestamps import format_time

Condition = dict[str, Any]

MAX_MESSAGE = 32_768
"""The schema's maxLength for messages: a longer one would make the API server refuse the whole status."""
MAX_REASON = 1_024


def find_condition(conditions: list[Condition] | None, type_: str) -> Condition | None:
    """The condition of ``type_``, or None."""
    for condition in conditions or []:
        if condition.get("type") == type_:
            return condition
    return None


def is_true(conditions: list[Condition] | None, type_: str) -> bool:
    """True when the condition exists with status True."""
    condition = find_condition(conditions, type_)
    return condition is not None and condition.get("status") == "True"


def set_condition(
    conditions: list[Condition] | None,
    type_: str,
    status: bool | str,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None,
) -> list[Condition]:
    """A new list with ``type_`` set; lastTransitionTime is kept unless ``status`` changed. Input is untouched."""
    status_text = status if isinstance(status, str) else ("True" if status else "False")
    previous = find_condition(conditions, type_)
    transition = (
        previous["lastTransitionTime"]
        if previous is not None and previous.get("status") == status_text and previous.get("lastTransitionTime")
        else format_time(now)
    )
    updated: Condition = {
        "type": type_,
        "status": status_text,
        "reason": reason[:MAX_REASON],
        "message": message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…",
        "lastTransitionTime": transition,
    }
    if generation is not None:
        updated["observedGeneration"] = generation
    # One pass (six conditions, set one by one on every pass of every session): `updated` where the
    # first condition of its type was, the others of that type dropped.
    result: list[Condition] = []
    placed = False
    for condition in conditions or []:
        if condition.get("type") != type_:
            result.append(dict(condition))
        elif not placed:
            result.append(updated)
            placed = True
    if not placed:
        result.append(updated)
    return result
