"""LabelSelector semantics."""

from __future__ import annotations

from typing import Any

import pytest

from agentsession_operator.decisions.selectors import selector_matches

LABELS = {"team": "a", "tier": "gold"}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        (None, LABELS, True),
        ({}, {}, True),
        ({"matchLabels": {"team": "a"}}, LABELS, True),
        ({"matchLabels": {"team": "b"}}, LABELS, False),
        ({"matchLabels": {"team": "a", "tier": "gold"}}, LABELS, True),
        ({"matchLabels": {"missing": ""}}, LABELS, False),
        ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]}, LABELS, True),
        ({"matchExpressions": [{"key": "team", "operator": "In", "values": ["b"]}]}, LABELS, False),
        ({"matchExpressions": [{"key": "nope", "operator": "In", "values": ["a"]}]}, LABELS, False),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["b"]}]}, LABELS, True),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, LABELS, False),
        ({"matchExpressions": [{"key": "nope", "operator": "NotIn", "values": ["a"]}]}, LABELS, True),
        ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, LABELS, True),
        ({"matchExpressions": [{"key": "nope", "operator": "Exists"}]}, LABELS, False),
        ({"matchExpressions": [{"key": "nope", "operator": "DoesNotExist"}]}, LABELS, True),
        ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, LABELS, False),
        ({"matchExpressions": [{"key": "team", "operator": "Bogus"}]}, LABELS, False),
        (
            {"matchLabels": {"team": "a"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["x"]}]},
            LABELS,
            False,
        ),
        ({"matchLabels": {"team": "a"}}, None, False),
    ],
)
def test_selector(selector: dict[str, Any] | None, labels: dict[str, str] | None, expected: bool) -> None:
    assert selector_matches(selector, labels) is expected
