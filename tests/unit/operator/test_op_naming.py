"""Claim names: deterministic, valid, short enough for Pod, Service and PVC names."""

from __future__ import annotations

import re

import pytest

from agentsession_operator.decisions.naming import claim_name, is_dns1035_label, label_value, short_hash

UID = "11111111-2222-3333-4444-555555555555"
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize("name", ["demo", "my-session-1", "a", "a" * 63])
def test_short_valid_names_are_kept(name: str) -> None:
    assert claim_name(name, UID) == name


@pytest.mark.parametrize(
    "name",
    [
        "a" * 64,
        "a" * 253,
        "my.dotted.session",
        "1-starts-with-digit",
        "123",
        "x" * 60 + ".y",
        "a-" * 40 + "b",
        "0." + "9" * 200,
    ],
)
def test_long_or_unusual_names_become_valid_labels(name: str) -> None:
    result = claim_name(name, UID)
    assert len(result) <= 63
    assert DNS1035.fullmatch(result), result
    assert is_dns1035_label(result)
    assert result.endswith("-" + short_hash(name, UID))
    # the PVC name <volume>-<claim> stays a valid DNS subdomain for any valid volume name
    assert len("v" * 63 + "-" + result) <= 253


def test_deterministic_and_uid_sensitive() -> None:
    long = "session-" + "x" * 80
    assert claim_name(long, UID) == claim_name(long, UID)
    assert claim_name(long, UID) != claim_name(long, "another-uid")
    assert claim_name(long + "a", UID) != claim_name(long + "b", UID)


def test_readable_stem_kept() -> None:
    result = claim_name("team-alpha." + "long-session-name-" * 4, UID)
    assert result.startswith("team-alpha-long-session-name")


def test_label_value() -> None:
    assert label_value("demo") == "demo"
    assert label_value("a.b") == "a.b"
    long = "a" * 100
    value = label_value(long)
    assert len(value) <= 63
    assert value.endswith(short_hash(long))
    assert label_value(long) == value
    assert label_value("a" * 99 + "b") != value
