"""Storage quantities for maxStorage and volume requests."""

from __future__ import annotations

import pytest

from agentsession_api.quantities import format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10Gi", 10 * 2**30),
        ("500Mi", 500 * 2**20),
        ("1G", 10**9),
        ("1k", 1000),
        ("1Ki", 1024),
        ("1073741824", 2**30),
        ("0", 0),
        ("1.5Gi", 3 * 2**29),
        ("0.5Ki", 512),
        ("1.0001k", 1001),  # rounds up to whole bytes
        ("2Ti", 2 * 2**40),
        ("1Ei", 2**60),
    ],
)
def test_parse(text: str, expected: int) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "10GB", "10gi", "-1Gi", "+1Gi", "1e9", "1m", "Gi", "1 Gi", ".5Gi", "1.Gi", "x"])
def test_parse_invalid(text: str) -> None:
    with pytest.raises(ValueError, match="10Gi, 500Mi, 1G"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("num", "text"), [(10 * 2**30, "10Gi"), (1536 * 2**20, "1536Mi"), (1000, "1000"), (0, "0"), (2**20, "1Mi")]
)
def test_format(num: int, text: str) -> None:
    assert format_quantity(num) == text
