"""kube/status_writer.py: the status write, its fallback when the schema refuses it, and a 404."""

from __future__ import annotations

from typing import Any

import pytest
from fake_kube import FakeKube, store

from agentsession_operator.infra.logs import logger
from agentsession_operator.kube.api import ApiException
from agentsession_operator.kube.status_writer import SessionGone, StatusWriter

# A condition as the CRD requires it (lastTransitionTime is required: the API server refuses one without).
READY = {"type": "Ready", "status": "True", "reason": "SandboxReady", "lastTransitionTime": "2026-12-06T00:00:00Z"}


def _writer(kube: FakeKube) -> tuple[StatusWriter, list[Any], list[Any], list[Any]]:
    events: list[Any] = []
    remembered: list[Any] = []
    deleted: list[Any] = []
    writer = StatusWriter(
        kube,  # type: ignore[arg-type]
        lambda: None,
        lambda obj, reason, message, type_: events.append((reason, type_)),
        lambda key, body: remembered.append(key),
        lambda key, uid: deleted.append((key, uid)),
    )
    return writer, events, remembered, deleted


async def test_a_phase_change_is_written_remembered_and_told(make_session: Any) -> None:
    kube = FakeKube()
    session = make_session()
    key = store(kube, session)
    writer, events, remembered, _ = _writer(kube)
    patch = {"phase": "Ready", "conditions": [READY]}
    await writer.write(key, session, patch, logger())
    assert kube.sessions[key]["status"]["phase"] == "Ready" and remembered == [key]
    assert events == [("SandboxReady", "Normal")] and writer.records.of(key).counted_phase == "Ready"
    writer.forget(key)
    assert writer.records.get(key) is None


async def test_provisioning_gets_no_event(make_session: Any) -> None:
    kube = FakeKube()
    session = make_session()
    key = store(kube, session)
    writer, events, _, _ = _writer(kube)
    await writer.write(key, session, {"phase": "Provisioning"}, logger())
    assert events == []


async def test_a_schema_refusal_writes_the_minimal_status(make_session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube()
    session = make_session()
    key = store(kube, session)
    real = kube.patch_session_status
    calls: list[dict[str, Any]] = []

    async def refusing(namespace: str, name: str, status: dict[str, Any], **fence: Any) -> Any:
        calls.append(status)
        if len(calls) == 1:
            raise ApiException(status=422, reason="Unprocessable")
        return await real(namespace, name, status, **fence)

    monkeypatch.setattr(kube, "patch_session_status", refusing)
    writer, events, _, _ = _writer(kube)
    await writer.write(key, session, {"phase": "Ready", "podName": "x" * 10}, logger())
    assert len(calls) == 2 and "podName" not in calls[1] and calls[1]["phase"] == "Ready"
    assert ("StatusRejected", "Warning") in events


async def test_a_404_ends_the_session(make_session: Any) -> None:
    kube = FakeKube()
    writer, _, _, deleted = _writer(kube)
    with pytest.raises(SessionGone):
        await writer.write(("ns", "demo"), make_session(), {"phase": "Ready"}, logger())
    assert deleted and deleted[0][0] == ("ns", "demo")


async def test_a_status_for_a_session_replaced_under_its_name_is_dropped_as_gone(make_session: Any) -> None:
    """The writer passes the UID of the body the pass decided on: a namesake (another UID) gets none of it."""
    kube = FakeKube()
    session = make_session()
    key = store(kube, session)
    kube.sessions[key] = {**session, "metadata": {**session["metadata"], "uid": "namesake"}}
    before = kube.sessions[key].get("status")
    writer, _, _, gone = _writer(kube)
    with pytest.raises(SessionGone):
        await writer.write(key, session, {"phase": "Ready"}, logger())
    assert kube.sessions[key].get("status") == before and gone


async def test_the_metrics_count_what_the_writes_did(make_session: Any) -> None:
    """agentsession_sessions follows each session's phase (one count per session, moved not added), its
    end (forget) takes the count away, and time to Ready is observed once, at the first Ready, from
    the session's creation."""
    from prometheus_client import REGISTRY

    def value(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels or None) or 0.0

    namespace = "metrics-ns"  # a namespace no other test writes to: its gauge starts at 0
    kube = FakeKube()
    session = make_session(namespace=namespace, created="2025-01-01T11:00:00Z")
    key = store(kube, session)
    writer, _, _, _ = _writer(kube)
    ready_count = value("agentsession_time_to_ready_seconds_count")
    ready_sum = value("agentsession_time_to_ready_seconds_sum")
    await writer.write(key, session, {"phase": "Provisioning"}, logger())
    assert value("agentsession_sessions", namespace=namespace, phase="Provisioning") == 1
    ready = {"phase": "Ready", "readyAt": "2025-01-01T11:00:03Z"}
    await writer.write(key, kube.sessions[key] | {"status": {"phase": "Provisioning"}}, ready, logger())
    assert value("agentsession_sessions", namespace=namespace, phase="Provisioning") == 0
    assert value("agentsession_sessions", namespace=namespace, phase="Ready") == 1
    assert value("agentsession_time_to_ready_seconds_count") - ready_count == 1
    assert value("agentsession_time_to_ready_seconds_sum") - ready_sum == pytest.approx(3.0)
    await writer.write(key, kube.sessions[key], {"phase": "Ready"}, logger())  # Ready again: nothing moves
    assert value("agentsession_sessions", namespace=namespace, phase="Ready") == 1
    assert value("agentsession_time_to_ready_seconds_count") - ready_count == 1
    writer.forget(key)
    assert value("agentsession_sessions", namespace=namespace, phase="Ready") == 0
