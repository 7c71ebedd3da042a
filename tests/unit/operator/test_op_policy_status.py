"""kube/policy_status.py: a policy's status is written when it changes, and once per burst of session changes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentsession_operator.kube import policy_status
from agentsession_operator.kube.background import Background
from agentsession_operator.kube.cache import Cache


class PolicyKube:
    def __init__(self) -> None:
        self.written: list[tuple[str, str, dict[str, Any]]] = []

    async def patch_policy_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.written.append((namespace, name, status))


async def test_written_when_it_changes_and_once_per_burst(make_policy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy_status, "DEBOUNCE", 0.05)
    kube, cache, background = PolicyKube(), Cache(), Background()
    cache.policies["ns"]["p"] = make_policy("p")
    room = policy_status.PolicyStatus(kube, cache, background, lambda _ns: True)  # type: ignore[arg-type]
    await room.update("ns", "p")
    assert [w[:2] for w in kube.written] == [("ns", "p")]
    cache.policies["ns"]["p"]["status"] = kube.written[0][2]
    await room.update("ns", "p")  # nothing changed: nothing written
    assert len(kube.written) == 1
    for _ in range(10):
        room.soon("ns")
    assert room.due == {"ns"} and len(background.tasks) == 1
    await asyncio.gather(*background.tasks)
    assert room.due == set()


async def test_a_standby_writes_no_policy_status(make_policy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy_status, "DEBOUNCE", 0.01)
    kube, cache, background = PolicyKube(), Cache(), Background()
    cache.policies["ns"]["p"] = make_policy("p")
    room = policy_status.PolicyStatus(kube, cache, background, lambda _ns: False)  # type: ignore[arg-type]
    room.soon("ns")
    await asyncio.gather(*background.tasks)
    assert kube.written == []
