"""The activity annotation ``agentsession.dev/activity``: ``"<RFC 3339 time> busy=<seconds>"``.

The client writes it whenever it uses the sandbox (:func:`format_activity`); the operator parses it
(:func:`parse_activity`) and restarts the idle clock with its *own* time, so a client whose clock runs
slow cannot get its sandbox reaped early. ``busy=<seconds>`` pauses the idle clock while a long command runs.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from agentsession_api.timestamps import parse_time, utc

MAX_BUSY_SECONDS: Final = 7 * 24 * 3600
"""A client cannot pause the idle clock for longer than this with one write."""
MAX_LENGTH: Final = 256
"""``status.lastActivityReport`` keeps the annotation's value: the schema's bound."""

REPORT_DIGEST_PREFIX: Final = "sha256:"

_ACTIVITY = re.compile(r"^\s*(\S+)\s+busy=([0-9]+(?:\.[0-9]+)?)\s*$")


@dataclass(frozen=True)
class Activity:
    """One parsed activity annotation."""

    client_time: datetime
    busy_seconds: float


def format_activity(now: datetime, busy_seconds: float = 0) -> str:
    """The annotation's value for a report made at ``now`` (microsecond precision, ``Z``)."""
    stamp = utc(now).isoformat(timespec="microseconds").replace("+00:00", "Z")
    # `%g` writes an exponent below 1e-4 and from 1e6 on, which the pattern refuses: 0 and the cap instead.
    busy = min(max(busy_seconds, 0), MAX_BUSY_SECONDS)
    return f"{stamp} busy={0 if busy < 1e-4 else busy:g}"


def parse_activity(annotation_value: object) -> Activity | None:
    """The annotation parsed; None for anything else (never raises on client input)."""
    if not isinstance(annotation_value, str):
        return None
    match = _ACTIVITY.match(annotation_value)
    if match is None:
        return None
    client_time = parse_time(match.group(1))
    busy = float(match.group(2))
    if client_time is None or not math.isfinite(busy):
        return None
    return Activity(client_time=client_time, busy_seconds=min(busy, MAX_BUSY_SECONDS))


def report_key(annotation_value: str) -> str:
    """What ``status.lastActivityReport`` keeps of an annotation: the value itself when it is short,
    printable ASCII, else ``sha256:<hex>`` of it (always within :data:`MAX_LENGTH`, and stable, so the
    operator still tells a new report from one it counted already)."""
    if len(annotation_value) <= MAX_LENGTH and annotation_value.isascii() and annotation_value.isprintable():
        return annotation_value
    return REPORT_DIGEST_PREFIX + hashlib.sha256(annotation_value.encode("utf-8", "surrogatepass")).hexdigest()
