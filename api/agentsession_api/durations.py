"""Go-style durations (``1h30m``, ``90s``, ``1.5h``, ``300ms``), parsed exactly as the CRD admits them.

The CRD checks a duration twice: a ``pattern`` (:data:`DURATION_PATTERN`) and a CEL rule
``duration(self) > duration('0s')``. CEL's ``duration()`` is Go's ``time.ParseDuration``, which is looser
than the pattern (signs, ``.5h``, a bare ``0``), so the pattern is the contract and this parser accepts
exactly the strings the pattern accepts, sums the groups the way Go does (whole nanoseconds, each group
truncated) and refuses zero and anything beyond Go's int64 nanosecond range (which CEL would refuse too).
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from decimal import Decimal
from typing import Final

UNITS_NS: Final[dict[str, int]] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_UNIT_ALTERNATION: Final = "ns|us|µs|ms|s|m|h"
DURATION_PATTERN: Final = rf"^([0-9]+(\.[0-9]+)?({_UNIT_ALTERNATION}))+$"
"""The schema pattern; the same text is compiled here, so Python and the API server agree."""
DURATION_MAX_LENGTH: Final = 64
MAX_NANOSECONDS: Final = 2**63 - 1
"""Go's time.Duration is an int64 of nanoseconds (about 292 years)."""

ALLOWED_TEXT: Final = (
    "a positive duration made of <number><unit> groups such as 30m, 2h, 1h30m, 1.5h or 300ms "
    "(units: h, m, s, ms, us, ns; no sign, no spaces, no days)"
)

_WHOLE = re.compile(DURATION_PATTERN)
_GROUP = re.compile(rf"([0-9]+(?:\.[0-9]+)?)({_UNIT_ALTERNATION})")


def parse_duration_ns(
    text: str, *, max_length: int | None = DURATION_MAX_LENGTH, max_ns: int = MAX_NANOSECONDS, allow_zero: bool = False
) -> int:
    """Whole nanoseconds of a duration string; ValueError (saying what is allowed) when invalid.

    The defaults are the CRD's limits. A reader of values someone else already validated may relax them
    explicitly (``max_length=None``, ``allow_zero=True``); the syntax is the same for everyone.
    """
    if not isinstance(text, str):
        raise ValueError(f"duration must be a string, got {type(text).__name__}: expected {ALLOWED_TEXT}")
    if (max_length is not None and len(text) > max_length) or not _WHOLE.fullmatch(text):
        raise ValueError(f"invalid duration {text!r}: expected {ALLOWED_TEXT}")
    total = 0
    for number, unit in _GROUP.findall(text):
        total += int(Decimal(number) * UNITS_NS[unit])  # int() truncates, like Go per group
        if total > max_ns:
            raise ValueError(f"invalid duration {text!r}: longer than the maximum of {format_duration_ns(max_ns)}")
    if total <= 0 and not allow_zero:
        raise ValueError(f"invalid duration {text!r}: must be greater than zero; expected {ALLOWED_TEXT}")
    return total


def parse_duration(text: str) -> timedelta:
    """A positive timedelta; sub-microsecond remainders round up so a positive duration stays positive."""
    return timedelta(microseconds=math.ceil(parse_duration_ns(text) / 1_000))


def duration_seconds(text: str, *, max_length: int | None = DURATION_MAX_LENGTH, allow_zero: bool = False) -> float:
    """Seconds of a duration string (a float), with the limits of :func:`parse_duration_ns`."""
    return parse_duration_ns(text, max_length=max_length, allow_zero=allow_zero) / 1e9


def format_duration_ns(nanoseconds: int) -> str:
    """Whole hours of a nanosecond count, for messages (``2562047h`` for Go's maximum)."""
    return f"about {nanoseconds // UNITS_NS['h']}h"


def format_duration(value: timedelta) -> str:
    """Shortest Go-style text for ``value`` (``2h``, ``1h30m``, ``1m30s``, ``1s500ms``); it parses back."""
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if micros == 0:
        return "0s"
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    parts: list[str] = []
    for unit, size in (("h", 3_600_000_000), ("m", 60_000_000), ("s", 1_000_000), ("ms", 1_000), ("us", 1)):
        count, micros = divmod(micros, size)
        if count:
            parts.append(f"{count}{unit}")
    return sign + "".join(parts)
