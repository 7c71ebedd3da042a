"""Go-style durations ("90s", "15m", "1h30m"): the API's own parser (agentsession_api.durations)."""

from __future__ import annotations

from agentsession_api.durations import duration_seconds


def parse_seconds(text: str) -> float | None:
    """Seconds in `text`, or None when it is not a duration (the API's syntax; zero and any length allowed,
    since this reads values the API server already admitted)."""
    try:
        return duration_seconds(text, max_length=None, allow_zero=True)
    except ValueError:
        return None


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
