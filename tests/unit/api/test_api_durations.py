"""Go-style durations: exactly what the CRD pattern admits, positive, summed like Go."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, cast

import pytest

from agentsession_api import durations
from agentsession_api.durations import format_duration, parse_duration, parse_duration_ns


def is_valid_duration(text: object) -> bool:
    """The API server would admit ``text`` as a duration (parse_duration_ns refuses everything else)."""
    try:
        parse_duration_ns(text)  # type: ignore[arg-type]
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2h", timedelta(hours=2)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("90s", timedelta(seconds=90)),
        ("1.5h", timedelta(minutes=90)),
        ("300ms", timedelta(milliseconds=300)),
        ("15m", timedelta(minutes=15)),
        ("1h1h", timedelta(hours=2)),
        ("1m30s250ms", timedelta(seconds=90, milliseconds=250)),
        ("10us", timedelta(microseconds=10)),
        ("10µs", timedelta(microseconds=10)),
        ("0.5s", timedelta(milliseconds=500)),
        ("00010s", timedelta(seconds=10)),
        ("1ns", timedelta(microseconds=1)),  # rounds up: a positive duration stays positive
        ("1500ns", timedelta(microseconds=2)),
        ("2562047h", timedelta(hours=2562047)),
    ],
)
def test_parse_valid(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected
    assert is_valid_duration(text)


@pytest.mark.parametrize(
    ("text", "nanoseconds"),
    [("1ns", 1), ("1.5us", 1500), ("1.0000000001s", 1_000_000_000), ("0.1ns", None), ("1h", 3_600_000_000_000)],
)
def test_nanoseconds_truncate_per_group_like_go(text: str, nanoseconds: int | None) -> None:
    if nanoseconds is None:
        with pytest.raises(ValueError, match="greater than zero"):
            parse_duration_ns(text)
    else:
        assert parse_duration_ns(text) == nanoseconds


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0",
        "0s",
        "0h0m",
        "-1h",
        "+1h",
        "1",
        "h",
        "1d",
        "2w",
        "1H",
        "1 h",
        " 1h",
        "1h ",
        ".5h",
        "1.h",
        "1e3s",
        "1h-30m",
        "1μs",  # Greek mu (U+03BC): Go accepts it, the schema pattern does not
        "1sec",
        "abc",
        "2562048h",  # beyond Go's int64 nanoseconds: CEL's duration() fails too
        "9" * 70 + "h",  # longer than maxLength
    ],
)
def test_parse_invalid_says_what_is_allowed(text: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_duration(text)
    message = str(err.value)
    assert repr(text) in message or "maximum" in message
    assert not is_valid_duration(text)


def test_error_message_lists_units() -> None:
    with pytest.raises(ValueError, match=r"units: h, m, s, ms, us, ns") as err:
        parse_duration("2d")
    assert "30m" in str(err.value)


def test_non_string_rejected() -> None:
    with pytest.raises(ValueError, match="must be a string"):
        parse_duration(cast(Any, 7200))
    assert not is_valid_duration(None)


def test_python_and_schema_pattern_agree() -> None:
    """The schema pattern text and the parser accept the same syntax (the CEL rule adds only "> 0")."""
    pattern = re.compile(durations.DURATION_PATTERN)
    for text in ["2h", "1h30m", "1.5h", "300ms", "5µs", "0s", "1d", "-1h", ".5h", "1.h", ""]:
        syntax_ok = bool(pattern.fullmatch(text))
        assert is_valid_duration(text) == (syntax_ok and text != "0s"), text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(hours=2), "2h"),
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(seconds=90), "1m30s"),
        (timedelta(milliseconds=1500), "1s500ms"),
        (timedelta(microseconds=7), "7us"),
        (timedelta(days=2), "48h"),
        (timedelta(0), "0s"),
        (timedelta(hours=-1), "-1h"),
    ],
)
def test_format(value: timedelta, text: str) -> None:
    assert format_duration(value) == text


@pytest.mark.parametrize(
    "value", [timedelta(hours=2), timedelta(seconds=5401), timedelta(milliseconds=1), timedelta(days=3, seconds=7)]
)
def test_format_round_trips(value: timedelta) -> None:
    assert parse_duration(format_duration(value)) == value


# Boundary cases evaluated by the real admission code (apiextensions-apiserver v0.37.2: schema pattern plus
# the CEL rule `duration(self) > duration('0s')`); the parser must give the same answer for each.
APISERVER_VERDICTS = {
    "2562047h": True,
    "2562048h": False,
    "0.5ns": False,
    "1.5ns": True,
    "0.0001us": False,
    "0.001us": True,
    "1.999999999999s": True,
    "153722867m": True,
    "153722868m": False,
    "9223372036s": True,
    "9223372037s": False,
    "9223372036854775807ns": True,
    "9223372036854775808ns": False,
    "5µs": True,
    "0000h1ns": True,
    "2d": False,
    "0s": False,
    ".5h": False,
}


@pytest.mark.parametrize(("text", "admitted"), sorted(APISERVER_VERDICTS.items()))
def test_agrees_with_the_api_server(text: str, admitted: bool) -> None:
    assert is_valid_duration(text) is admitted


def test_limits_are_parameters_of_the_one_parser() -> None:
    """The CRD's limits are the defaults; a reader of admitted values relaxes them by name."""
    with pytest.raises(ValueError, match="greater than zero"):
        durations.parse_duration_ns("0s")
    assert durations.parse_duration_ns("0s", allow_zero=True) == 0
    long = "1s" * 40
    with pytest.raises(ValueError):
        durations.parse_duration_ns(long)
    assert durations.duration_seconds(long, max_length=None) == 40.0
