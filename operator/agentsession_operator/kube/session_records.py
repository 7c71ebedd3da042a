"""What the operator remembers about one session between its passes, in one record (issue 50 item 1).

The reconciler (a pass under way, one asked for meanwhile, retries, activity pacing, a pass over the cached
body), a pass (progress writes, a waiting fork's looks), the actor (a claim create met by a 409) and the status
writer (the phase it is counted under) each kept a map keyed by session; forgetting a session meant clearing
eleven of them. Now each keeps its fields here: a record is created on first need, pruned once every field
is back to its default (a session at rest costs one small record at most: its counted phase), and forgetting
a session is one removal.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass, fields

Key = tuple[str, str]


@dataclass(slots=True)
class SessionRecord:
    lock: asyncio.Lock | None = None
    """Held while a pass runs; none between passes (60,000 waiting sessions keep no lock)."""
    again: tuple[str, bool] | None = None
    """A pass asked for while one ran: its cause, and whether it reads the session first (fresh)."""
    failures: int = 0
    """Failed passes in a row (the retry's backoff)."""
    cached_due: tuple[dt.datetime, str] | None = None
    """A deadline whose pass reads the cached body (Reconciler.pass_soon), with its cause."""
    activity_only: bool = False
    """Its newest event changed nothing but the activity annotation (kube/fairness.py: paced)."""
    activity_passed: float | None = None
    """When (monotonic) a pass last ran for activity reports alone."""
    create_refused: bool = False
    """A claim create met an existing claim: the claim is read from then on."""
    progress_written: dt.datetime | None = None
    """A provisioning session's last progress write (the next waits longer)."""
    fork_waits: int = 0
    """Looks in a row that found a fork still waiting on its source (their backoff)."""
    counted_phase: str | None = None
    """The phase the session is counted under in agentsession_sessions{phase}."""


_DEFAULTS = {f.name: f.default for f in fields(SessionRecord)}


def _at_rest(record: SessionRecord) -> bool:
    return all(getattr(record, name) == default for name, default in _DEFAULTS.items())


class Records:
    def __init__(self) -> None:
        self._by_key: dict[Key, SessionRecord] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def get(self, key: Key) -> SessionRecord | None:
        return self._by_key.get(key)

    def of(self, key: Key) -> SessionRecord:
        """The session's record, created on first need."""
        record = self._by_key.get(key)
        if record is None:
            record = self._by_key[key] = SessionRecord()
        return record

    def prune(self, key: Key) -> None:
        """Drop the record once nothing is left in it."""
        record = self._by_key.get(key)
        if record is not None and _at_rest(record):
            del self._by_key[key]

    def drop(self, key: Key) -> SessionRecord | None:
        """The session is forgotten: its record goes (a pass under way keeps the object it holds)."""
        return self._by_key.pop(key, None)
