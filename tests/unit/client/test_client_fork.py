"""The client's fork flow, without a cluster: the spec it writes, and suspend_source's order (resume always)."""

from __future__ import annotations

from typing import Any

import pytest

from langchain_k8s_client import backend
from langchain_k8s_client.sessions import SessionSpec


def test_spec_of_a_fork() -> None:
    assert SessionSpec(fork_from="work").to_spec() == {"forkFrom": {"name": "work"}}
    assert SessionSpec(warm_pool="py", fork_from="work").conflicts({"spec": {"warmPoolRef": {"name": "py"}}}) == [
        "spec.forkFrom is None on the cluster, {'name': 'work'} here"
    ]


class FakeStore:
    api_client = object()

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def require(self, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append(("require", name))
        return {}

    def set_suspend(self, namespace: str, name: str, value: bool) -> None:
        self.calls.append(("suspend", name, value))

    def wait_phase(self, namespace: str, name: str, phase: str, timeout: float, on_progress: Any = None) -> None:
        self.calls.append(("wait", name, phase))


class FakeBackend:
    fail = False

    def __init__(self, name: str, namespace: str, **kwargs: Any) -> None:
        self.name, self.kwargs = name, kwargs
        FakeBackend.made.append(self)

    def wait_ready(self) -> None:
        if FakeBackend.fail:
            raise TimeoutError("not ready")

    made: list[FakeBackend] = []


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeStore:
    FakeBackend.made, FakeBackend.fail = [], False
    monkeypatch.setattr(backend, "AgentSessionSandbox", FakeBackend)
    return FakeStore()


def test_fork_creates_the_new_session_with_fork_from(fake: FakeStore) -> None:
    forked: Any = backend.fork_session(fake, "ns", "work", "work-b", warm_pool="py")  # type: ignore[arg-type]
    assert forked.name == "work-b" and forked.kwargs["fork_from"] == "work" and forked.kwargs["warm_pool"] == "py"
    assert fake.calls == [("require", "work")]  # no suspend asked: the source is not touched


def test_suspend_source_suspends_until_the_fork_is_ready_then_resumes(fake: FakeStore) -> None:
    backend.fork_session(fake, "ns", "work", "work-b", suspend_source=True)  # type: ignore[arg-type]
    assert fake.calls == [
        ("require", "work"),
        ("suspend", "work", True),
        ("wait", "work", "Suspended"),
        ("suspend", "work", False),
    ]


def test_the_source_is_resumed_when_the_fork_fails(fake: FakeStore) -> None:
    FakeBackend.fail = True
    with pytest.raises(TimeoutError):
        backend.fork_session(fake, "ns", "work", "work-b", suspend_source=True)  # type: ignore[arg-type]
    assert fake.calls[-1] == ("suspend", "work", False)


def test_a_fork_takes_no_volumes(fake: FakeStore) -> None:
    with pytest.raises(ValueError, match="copies of the source"):
        backend.fork_session(fake, "ns", "work", "b", volume_claim_templates=[{}])  # type: ignore[arg-type]


def test_a_source_suspended_before_the_fork_stays_suspended(fake: FakeStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28 item 12: `fork --suspend-source` resumed a source that was already suspended (by its owner, or
    by an idle policy), handing the tenant a running sandbox nobody asked for."""
    monkeypatch.setattr(fake, "require", lambda namespace, name: {"spec": {"suspend": True}})
    backend.fork_session(fake, "ns", "work", "work-b", suspend_source=True)  # type: ignore[arg-type]
    assert ("suspend", "work", False) not in fake.calls
    FakeBackend.fail = True
    with pytest.raises(TimeoutError):
        backend.fork_session(fake, "ns", "work", "work-c", suspend_source=True)  # type: ignore[arg-type]
    assert ("suspend", "work", False) not in fake.calls
