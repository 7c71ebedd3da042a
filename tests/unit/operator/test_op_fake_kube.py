"""The unit tests' API server (fake_kube) answers writes as kube-apiserver does, not looser."""

from __future__ import annotations

from typing import Any

import pytest
from fake_kube import FakeKube, store

from agentsession_operator.kube.api import ApiException

UID = "u-1"


def _session(status: dict[str, Any] | None = None, finalizers: list[str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "ns", "name": "s", "uid": UID, "finalizers": finalizers or []}
    return {"metadata": meta, "spec": {}, **({"status": status} if status is not None else {})}


async def test_a_merge_patch_merges_nested_objects_and_null_deletes() -> None:
    kube = FakeKube()
    key = store(kube, _session({"phase": "Ready", "resolved": {"ttl": "1h", "idleTimeout": "5m"}}))
    await kube.patch_session_status("ns", "s", {"resolved": {"ttl": "2h"}, "phase": None})
    assert kube.sessions[key]["status"] == {"resolved": {"ttl": "2h", "idleTimeout": "5m"}}


async def test_the_uid_tested_patch_replaces_members_whole_and_refuses_another_session() -> None:
    kube = FakeKube()
    key = store(kube, _session({"phase": "Ready", "resolved": {"ttl": "1h"}}))
    await kube.patch_session_status("ns", "s", {"resolved": {"ttl": "2h"}}, uid=UID)
    assert kube.sessions[key]["status"] == {"phase": "Ready", "resolved": {"ttl": "2h"}}
    assert await kube.patch_session_status("ns", "s", {"phase": "Failed"}, uid="another") is None
    assert kube.sessions[key]["status"]["phase"] == "Ready"


async def test_a_status_the_schema_refuses_is_422_and_unknown_fields_are_pruned() -> None:
    kube = FakeKube()
    key = store(kube, _session())
    with pytest.raises(ApiException) as refused:
        await kube.patch_session_status("ns", "s", {"conditions": [{"type": "Ready", "status": "Yes"}]}, uid=UID)
    assert refused.value.status == 422
    await kube.patch_session_status("ns", "s", {"phase": "Ready", "madeUp": 1}, uid=UID)
    assert kube.sessions[key]["status"] == {"phase": "Ready"}


async def test_delete_honours_the_uid_precondition_and_finalizers() -> None:
    kube = FakeKube()
    key = store(kube, _session(finalizers=["example.com/hold"]))
    await kube.delete_session("ns", "s", uid="another")
    assert "deletionTimestamp" not in kube.sessions[key]["metadata"]
    await kube.delete_session("ns", "s", uid=UID)
    assert kube.sessions[key]["metadata"]["deletionTimestamp"]
    kube.sessions[key]["metadata"]["finalizers"] = []
    await kube.delete_session("ns", "s", uid=UID)
    assert key not in kube.sessions


async def test_patching_an_absent_sandbox_is_404() -> None:
    with pytest.raises(ApiException) as absent:
        await FakeKube().patch_sandbox("ns", "nothing", {"spec": {"operatingMode": "Suspended"}})
    assert absent.value.status == 404
