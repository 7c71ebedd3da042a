"""Name rules shared by schema and Python checks."""

from __future__ import annotations

import pytest

from agentsession_api import patterns


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("team", True),
        ("sandbox.users.io/team", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("example.com/" + "a" * 63, True),
        ("a" * 253 + "/x", True),
        ("a" * 254 + "/x", False),
        ("Example.com/x", False),
        ("-team", False),
        ("team-", False),
        ("te am", False),
        ("a/b/c", False),
        ("/x", False),
        ("x/", False),
        ("", False),
        ("app.kubernetes.io/name", True),
        ("Team_Name.x", True),
    ],
)
def test_qualified_name(key: str, ok: bool) -> None:
    assert patterns.is_qualified_name(key) is ok


@pytest.mark.parametrize(
    ("value", "ok"), [("", True), ("a", True), ("a.b-c_d", True), ("-a", False), ("a" * 63, True), ("a" * 64, False)]
)
def test_label_value(value: str, ok: bool) -> None:
    assert patterns.is_label_value(value) is ok


def test_dns_names() -> None:
    assert patterns.is_dns1123_label("python-pool")
    assert not patterns.is_dns1123_label("python.pool")
    assert not patterns.is_dns1123_label("a" * 64)


def test_domains() -> None:
    assert patterns.key_domain("Sandbox.Users.IO/x") == "sandbox.users.io"
    assert patterns.key_domain("x") is None
    assert patterns.in_domain("sandbox.users.io", ["sandbox.users.io"])
    assert patterns.in_domain("team.sandbox.users.io", ["sandbox.users.io"])
    assert not patterns.in_domain("evilsandbox.users.io", ["sandbox.users.io"])
    assert not patterns.in_domain("users.io", ["sandbox.users.io"])
