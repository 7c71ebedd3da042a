"""Go-style durations ("90s", "15m", "1h30m") as the AgentSession API writes them."""

from __future__ import annotations

import re

_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_seconds(text: str) -> float | None:
    """Seconds in `text`, or None when it is not a duration."""
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return total if pos == len(text) and pos > 0 else None


def normalize(value: str | int | float | None) -> str | None:
    """Accept seconds as numbers too ("ttl=7200" reads as "7200s"); validate strings early."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("a duration must be a string like '2h' or a number of seconds")
    if isinstance(value, int | float):
        if value <= 0:
            raise ValueError(f"a duration must be positive, got {value}")
        return f"{value:g}s"
    if parse_seconds(value) is None or (parse_seconds(value) or 0) <= 0:
        raise ValueError(f"{value!r} is not a positive duration: use Go syntax such as 30m, 2h or 1h30m")
    return value
