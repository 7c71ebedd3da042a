"""Writing a session's status: bounded, never frozen by a schema refusal, and what a phase change tells
(the phase gauge, an Event, time to Ready)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agentsession_api import phases
from agentsession_api.phases import Phase
from agentsession_api.timestamps import parse_time
from agentsession_operator.decisions import status as session_status
from agentsession_operator.infra import metrics
from agentsession_operator.kube.api import ApiException
from agentsession_operator.kube.cache import Key
from agentsession_operator.kube.client import Kube
from agentsession_operator.kube.session_records import Records

EventPoster = Callable[[Mapping[str, Any], str, str, str], None]


class SessionGone(Exception):
    """The session this pass acts for was deleted meanwhile: nothing more is written for it."""


class StatusWriter:
    def __init__(
        self,
        kube: Kube,
        fence: Callable[[], None],
        event: EventPoster,
        remember: Callable[[Key, dict[str, Any]], None],
        deleted: Callable[[Key, str | None], None],
        records: Records | None = None,
    ) -> None:
        self.kube = kube
        self.fence = fence  # raises when this replica may not write
        self.event = event
        self.remember = remember  # the written body into the cache
        self.deleted = deleted  # a 404: the session is gone
        # The phase each session is counted under: record.counted_phase (kube/session_records.py).
        self.records = records if records is not None else Records()

    async def write(self, key: Key, session: Mapping[str, Any], patch: dict[str, Any], log: Any) -> None:
        before = (session.get("status") or {}).get("phase")
        patch = session_status.bounded_status(patch)
        # Fenced by UID: a status computed from this body never lands on a session created anew under its name.
        uid, has_status = session["metadata"].get("uid"), session.get("status") is not None
        self.fence()
        try:
            written = await self.kube.patch_session_status(key[0], key[1], patch, uid=uid, has_status=has_status)
        except ApiException as exc:
            if exc.status != 422:
                raise
            # Refused by the schema: never let that freeze the session. Write the phase and the idle
            # clock alone (what reaping reads), say so, and let the pass go on.
            log.warning("status refused by the API server; wrote the minimal status", error=str(exc.reason))
            self.event(session, "StatusRejected", f"status update refused: {str(exc.reason)[:512]}", "Warning")
            patch = session_status.minimal_status(patch)
            self.fence()
            written = await self.kube.patch_session_status(key[0], key[1], patch, uid=uid, has_status=has_status)
        if written is None:
            # 404, or another UID under the name: the session is gone. Remember it, so that no later trigger
            # (the garbage collector deleting the claim this pass created, a deadline) acts on this body.
            self.deleted(key, session["metadata"].get("uid"))
            raise SessionGone()
        self.remember(key, written)
        after = patch.get("phase", before)
        self._count(key, after)
        if after != before and after:
            self._phase_changed(session, patch, before, after, log)

    def _count(self, key: Key, phase: str | None) -> None:
        record = self.records.get(key)
        previous = record.counted_phase if record is not None else None
        if phase and phase != previous:
            if previous:
                metrics.SESSIONS_BY_PHASE.labels(namespace=key[0], phase=previous).dec()
            metrics.SESSIONS_BY_PHASE.labels(namespace=key[0], phase=phase).inc()
            self.records.of(key).counted_phase = phase

    def forget(self, key: Key) -> None:
        """The session is forgotten: no longer counted under its phase (the caller drops its record)."""
        record = self.records.get(key)
        if record is not None and record.counted_phase:
            metrics.SESSIONS_BY_PHASE.labels(namespace=key[0], phase=record.counted_phase).dec()
            record.counted_phase = None
            self.records.prune(key)

    def _phase_changed(
        self, session: Mapping[str, Any], patch: Mapping[str, Any], before: str | None, after: str, log: Any
    ) -> None:
        ready: dict[str, Any] = next(
            (x for x in patch.get("conditions") or [] if x.get("type") == phases.COND_READY), {}
        )
        message = ready.get("message") or f"phase {after}"
        log.info("phase changed", old=before, new=after, reason=ready.get("reason"), message=message)
        warning = after in (Phase.FAILED,) or ready.get("reason") == phases.REASON_SANDBOX_UNAVAILABLE
        # Provisioning gets no Event: every new session passes through it, and it tells nothing the status
        # does not. Ready, Pending (a missing pool, a policy), the end phases and every Warning keep theirs.
        if warning or after != Phase.PROVISIONING:
            reason = after if not ready.get("reason") else str(ready["reason"])
            self.event(session, reason, message, "Warning" if warning else "Normal")
        if after == Phase.READY and patch.get("readyAt") and not (session.get("status") or {}).get("readyAt"):
            created = parse_time(session["metadata"].get("creationTimestamp"))
            ready_at = parse_time(patch["readyAt"])
            if created and ready_at:
                metrics.TIME_TO_READY.observe(max((ready_at - created).total_seconds(), 0.0))
