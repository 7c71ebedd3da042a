"""Which finished sessions to delete, per ``cleanup.deleteFinishedAfter``.

The clock starts when the session finished: the lastTransitionTime of its Expired or Failed condition
turning True, not its creation or its last status write (status writes happen after the end too).
Non-sticky failures (a policy violation, a name conflict) are not "finished": the user may still fix them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from agentsession_api import phases
from agentsession_api.phases import Phase
from agentsession_api.timestamps import utc
from agentsession_api.views import Session
from agentsession_operator.decisions.status import TERMINAL_CLAIM_REASONS


def finished_at(session: Mapping[str, Any]) -> datetime | None:
    """When the session reached Expired or a sticky Failed; None while it is not finished."""
    view = Session(session)
    if view.phase == Phase.EXPIRED:
        cond = view.condition(phases.COND_EXPIRED)
    elif view.phase == Phase.FAILED:
        cond = view.condition(phases.COND_FAILED)
        if cond and cond.reason not in TERMINAL_CLAIM_REASONS:
            return None
    else:
        return None
    if cond.status != "True":
        return None
    return cond.last_transition_time


def deletion_time(session: Mapping[str, Any], delete_finished_after: timedelta | None) -> datetime | None:
    """When the session becomes due for deletion; None when it is not finished or no retention applies."""
    finished = finished_at(session)
    if finished is None or delete_finished_after is None:
        return None
    return finished + delete_finished_after


def is_due(session: Mapping[str, Any], delete_finished_after: timedelta | None, now: datetime) -> bool:
    """True when the session should be deleted now (never while it is already being deleted)."""
    if (session.get("metadata") or {}).get("deletionTimestamp"):
        return False
    due = deletion_time(session, delete_finished_after)
    return due is not None and utc(now) >= due
