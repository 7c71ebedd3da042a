"""The activity annotation: what the client writes, the operator parses back."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agentsession_api.activity import MAX_BUSY_SECONDS, Activity, format_activity, parse_activity

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2025-01-01T12:00:00Z busy=0", Activity(T0, 0.0)),
        ("2025-01-01T12:00:00.123Z busy=30", Activity(T0.replace(microsecond=123000), 30.0)),
        ("2025-01-01T13:00:00+01:00 busy=1.5", Activity(T0, 1.5)),
        ("  2025-01-01T12:00:00Z   busy=5  ", Activity(T0, 5.0)),
        ("2025-01-01T12:00:00Z busy=99999999", Activity(T0, float(MAX_BUSY_SECONDS))),
        ("2025-01-01T12:00:00Z", None),
        ("busy=5", None),
        ("2025-01-01T12:00:00Z busy=-5", None),
        ("2025-01-01T12:00:00Z busy=abc", None),
        ("2025-01-01T12:00:00 busy=5", None),  # no offset: not RFC 3339
        ("yesterday busy=5", None),
        ("2025-13-01T12:00:00Z busy=5", None),
        ("", None),
        (None, None),
        (42, None),
        ("2025-01-01T12:00:00Z busy=5 extra", None),
    ],
)
def test_parse_activity(value: object, expected: Activity | None) -> None:
    assert parse_activity(value) == expected


@pytest.mark.parametrize("busy", [0, 1.5, 30, -3])
def test_what_the_client_writes_the_operator_reads(busy: float) -> None:
    written = format_activity(T0.replace(microsecond=123456), busy)
    assert written == f"2025-01-01T12:00:00.123456Z busy={max(busy, 0):g}"
    assert parse_activity(written) == Activity(T0.replace(microsecond=123456), max(busy, 0.0))


def test_report_key_is_bounded_printable_and_stable() -> None:
    from agentsession_api.activity import MAX_LENGTH, report_key

    short = "2025-01-01T00:00:00Z busy=0"
    assert report_key(short) == short
    for hostile in ("x" * 10_000, "a\x00b", "é" * 10, short + " " * 300):
        key = report_key(hostile)
        assert len(key) <= MAX_LENGTH and key.isascii() and key.isprintable()
        assert key == report_key(hostile) and key != report_key(hostile + "!")


@pytest.mark.parametrize("busy", [3.2e-05, 1e-9, 5e-5, 1e6, 2.5e7, 1e300])
def test_every_busy_value_formats_to_a_report_the_operator_parses(busy: float) -> None:
    """`%g` wrote `busy=3.2e-05` (a wake just after a report) and `busy=1e+06`, which the annotation's pattern
    refuses: the operator ignored the report. Tiny values are 0, huge ones the cap (found by client-ts)."""
    from datetime import UTC, datetime

    from agentsession_api.activity import MAX_BUSY_SECONDS, format_activity, parse_activity

    parsed = parse_activity(format_activity(datetime(2026, 12, 3, tzinfo=UTC), busy))
    assert parsed is not None
    assert parsed.busy_seconds == (0 if busy < 1e-4 else MAX_BUSY_SECONDS)
