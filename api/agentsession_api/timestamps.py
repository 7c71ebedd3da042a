"""RFC 3339 timestamps as Kubernetes writes them (second precision, ``Z``; MicroTime), and tolerant parsing."""

from __future__ import annotations

from datetime import UTC, datetime


def utc(moment: datetime) -> datetime:
    """``moment`` as an aware UTC datetime (naive values are taken to be UTC already)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def format_time(moment: datetime) -> str:
    """``2024-05-01T12:00:00Z``: the form metav1.Time uses; sub-second parts are dropped."""
    return utc(moment).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    """``2024-05-01T12:00:00.123456Z``: metav1.MicroTime (an Event's eventTime, a Lease's renewTime)."""
    return utc(moment).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: object) -> datetime | None:
    """An aware UTC datetime from RFC 3339 text (``Z`` or an offset, optional fraction); None when invalid."""
    if isinstance(text, datetime):
        return utc(text)
    if not isinstance(text, str) or not text:
        return None
    candidate = text.strip()
    if candidate[-1:] in ("Z", "z"):
        candidate = candidate[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(candidate)
    except ValueError:
        return None
    if parsed.tzinfo is None:  # RFC 3339 requires an offset; refuse rather than guess
        return None
    return utc(parsed)
