"""SessionManager on its own: one session per thread, the same name from every replica, its labels,
defaults and overrides, and list/delete narrowed to what it created (the e2e tests run it end to end)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from langchain_k8s_client import manager
from langchain_k8s_client.manager import MANAGER_LABEL, MANAGER_VALUE, THREAD_LABEL, SessionManager


class _Api:
    """The CustomObjectsApi calls list() and delete() make, recorded; a missing session answers 404."""

    def __init__(self) -> None:
        self.selectors: list[str] = []
        self.deleted: list[tuple[str, str]] = []
        self.items: list[dict[str, Any]] = []

    def list_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, **kw: Any) -> Any:
        self.selectors.append(kw["label_selector"])
        return {"items": self.items}

    def delete_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str, **kw: Any
    ) -> Any:
        if name.endswith(manager.session_name("missing")[-10:]):
            raise ApiException(status=404)
        self.deleted.append((namespace, name))


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every AgentSessionSandbox / fork_session the manager would open, recorded instead of opened."""
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(manager, "AgentSessionSandbox", lambda *a, **kw: calls.append((a, kw)) or "sandbox")
    monkeypatch.setattr(manager, "fork_session", lambda *a, **kw: calls.append((a, kw)) or "fork")
    return calls


def a_manager(**kw: Any) -> tuple[SessionManager, _Api]:
    sessions = SessionManager("team-a", labels={"team": "a"}, api_client=client.ApiClient(), **kw)
    api = _Api()
    sessions._store.api = api  # type: ignore[assignment]
    return sessions, api


def test_every_replica_names_a_thread_alike_and_threads_apart() -> None:
    one, _ = a_manager()
    other, _ = a_manager()
    assert one.name_for("Thread #1") == other.name_for("Thread #1") != one.name_for("Thread #2")
    assert len(one.name_for("x" * 500)) <= 63


def test_get_opens_the_threads_session_with_labels_defaults_and_overrides(made: list[Any]) -> None:
    sessions, _ = a_manager(warm_pool="pool", ttl="1h")
    assert sessions.get("t1", ttl="2h") == "sandbox"
    ((args, kw),) = made
    assert args == (sessions.name_for("t1"), "team-a")
    assert kw["keep"] is True and kw["warm_pool"] == "pool" and kw["ttl"] == "2h"  # the override wins
    assert kw["session_labels"] == {"team": "a", THREAD_LABEL: manager.thread_hash("t1"), MANAGER_LABEL: MANAGER_VALUE}


def test_fork_names_both_threads_and_leaves_the_volumes_to_the_copy(made: list[Any]) -> None:
    sessions, _ = a_manager(warm_pool="pool", volume_claim_templates=[{"metadata": {"name": "w"}}])
    assert sessions.fork("t1", "t2", suspend_source=True) == "fork"
    ((args, kw),) = made
    assert args[1:] == ("team-a", sessions.name_for("t1"), sessions.name_for("t2"))
    assert kw["suspend_source"] is True and kw["warm_pool"] == "pool" and "volume_claim_templates" not in kw
    assert kw["session_labels"][THREAD_LABEL] == manager.thread_hash("t2")


def test_list_and_delete_touch_only_what_the_manager_made() -> None:
    sessions, api = a_manager()
    api.items = [{"metadata": {"name": "thread-t1-x", "namespace": "team-a", "uid": "u1"}, "spec": {}}]
    assert [view.name for view in sessions.list({"extra": "1"})] == ["thread-t1-x"]
    assert api.selectors == [f"{MANAGER_LABEL}={MANAGER_VALUE},team=a,extra=1"]
    assert sessions.delete("t1") is True and api.deleted == [("team-a", sessions.name_for("t1"))]
    assert sessions.delete("missing") is False


def test_a_bad_prefix_or_empty_thread_is_refused_saying_why() -> None:
    with pytest.raises(ValueError, match="prefix must be a short lowercase DNS label"):
        SessionManager(prefix="Not_A_Label", api_client=client.ApiClient()).name_for("t")
    with pytest.raises(ValueError, match="thread_id must not be empty"):
        a_manager()[0].name_for("")
