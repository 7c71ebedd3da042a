"""The reconciler against a fake API server that validates status like the CRD schema does (issue 11).

The fake checks every status patch with the contract's pydantic model (the same one `make crds` turns
into the schema), so a value over a bound is refused with 422 as the real API server would refuse it.
"""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
import pytest

from agentsession_api import names
from agentsession_api.activity import format_activity
from agentsession_api.types import AgentSessionStatus
from agentsession_operator.kube import reconciler as reconciler_module
from agentsession_operator.kube.api import ApiException
from agentsession_operator.kube.client import Kube
from agentsession_operator.kube.reconciler import Reconciler

Obj = dict[str, Any]


class FakeKube:
    """Only what a reconcile pass calls; status patches are merged and validated against the schema."""

    def __init__(self, session: Obj) -> None:
        self.session = session
        self.events: list[tuple[str, str, str]] = []
        self.refused = 0
        self.claims: list[Obj] = []

    async def get_session(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.session)

    async def patch_session_status(
        self, namespace: str, name: str, status: Obj, uid: str | None = None, has_status: bool = True
    ) -> Obj | None:
        merged = {**(self.session.get("status") or {}), **status}
        merged = {k: v for k, v in merged.items() if v is not None}
        try:
            AgentSessionStatus.model_validate(merged)
        except pydantic.ValidationError as err:
            self.refused += 1
            raise ApiException(status=422, reason=f"Unprocessable Entity: {err}") from None
        self.session = {**self.session, "status": merged}
        return copy.deepcopy(self.session)

    async def get_claim(self, namespace: str, name: str) -> Obj | None:
        return None

    async def get_sandbox(self, namespace: str, name: str) -> Obj | None:
        return None

    async def get_warm_pool(self, namespace: str, name: str) -> Obj | None:
        return {"metadata": {"name": name, "namespace": namespace}}

    async def allowed_label_domains(self, namespace: str, name: str) -> list[str]:
        return ["sandbox.users.io"]

    async def create_claim(self, claim: Obj) -> Obj | None:
        self.claims.append(claim)
        return claim

    async def event(self, obj: Obj, reason: str, message: str, type_: str = "Normal") -> None:
        self.events.append((reason, message, type_))


def session_with(annotation: str, created: datetime) -> Obj:
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.SESSION_KIND,
        "metadata": {
            "name": "s1",
            "namespace": "tenant-a",
            "uid": "11111111-2222-3333-4444-555555555555",
            "generation": 1,
            "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "annotations": {names.ANNOTATION_ACTIVITY: annotation},
        },
        "spec": {"warmPoolRef": {"name": "python-pool"}, "idleTimeout": "10m"},
    }


async def reconcile(fake: FakeKube, rec: Reconciler | None = None) -> Reconciler:
    if rec is None:
        rec = Reconciler(fake)  # type: ignore[arg-type]
        rec.cache.loaded = True
    await rec.reconcile(("tenant-a", "s1"), cause="test")
    await asyncio.gather(*rec._background)  # Events are posted in the background
    return rec


@pytest.mark.parametrize(
    "annotation",
    [
        format_activity(datetime.now(UTC)) + " " * 300,  # valid (trailing blanks), longer than the bound
        "x" * 300,  # garbage, longer than the bound
        "2025-01-01T00:00:00Z busy=1\x00\x1b[2J",  # control characters
    ],
    ids=["valid-but-long", "garbage-long", "control-chars"],
)
async def test_long_activity_annotation_never_wedges_status(annotation: str) -> None:
    """Attack: an annotation over the 256-character bound of status.lastActivityReport made every
    status patch fail with 422, freezing status and idle reaping for good."""
    fake = FakeKube(session_with(annotation, datetime.now(UTC) - timedelta(minutes=1)))
    await reconcile(fake)
    status = fake.session.get("status") or {}
    assert status.get("phase") == "Provisioning", f"status never written ({fake.refused} refused)"
    report = status["lastActivityReport"]
    assert len(report) <= 256 and report.isprintable()
    # The next pass sees the same annotation as already counted: the idle clock does not restart.
    first = status.get("lastActivityTime")
    await reconcile(fake)
    assert (fake.session.get("status") or {}).get("lastActivityTime") == first


async def test_status_refused_by_validation_falls_back_to_a_minimal_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever else a status carries, a 422 on the full patch still lets phase and the idle clock through."""
    fake = FakeKube(session_with(format_activity(datetime.now(UTC)), datetime.now(UTC) - timedelta(minutes=1)))
    real = fake.patch_session_status

    async def refuses_resolved(namespace: str, name: str, status: Obj, **fence: Any) -> Obj | None:
        if "resolved" in status:
            fake.refused += 1
            raise ApiException(status=422, reason="Unprocessable Entity: status.resolved: something unforeseen")
        return await real(namespace, name, status, **fence)

    monkeypatch.setattr(fake, "patch_session_status", refuses_resolved)
    await reconcile(fake)
    status = fake.session.get("status") or {}
    assert status.get("phase") == "Provisioning"  # written in the pass that created the claim
    assert status.get("lastActivityTime") and status.get("lastActivityReport")
    assert any(reason == "StatusRejected" and kind == "Warning" for reason, _, kind in fake.events)


def test_reconciler_module_is_importable() -> None:
    assert reconciler_module.Reconciler is Reconciler


async def test_no_session_is_acted_on_before_policies_are_loaded() -> None:
    """Item 3. Attack: policy and session applied together (GitOps), or an operator restart: the session
    was reconciled before its policy arrived and got a claim with an env the policy forbids."""
    session = session_with(format_activity(datetime.now(UTC)), datetime.now(UTC) - timedelta(minutes=1))
    session["spec"]["env"] = [{"name": "AWS_SECRET", "value": "x"}]
    fake = FakeKube(session)
    forbidding = {
        "apiVersion": names.API_VERSION,
        "kind": names.POLICY_KIND,
        "metadata": {"name": "p", "namespace": "tenant-a"},
        "spec": {"limits": {"env": {"deny": ["AWS_*"]}}},
    }

    async def list_policies(namespace: str | None) -> list[Obj]:
        return [forbidding]

    async def list_warm_pools(namespace: str | None = None) -> list[Obj]:
        return [{"metadata": {"name": "python-pool", "namespace": "tenant-a"}}]

    async def list_templates(namespace: str | None = None) -> list[Obj]:
        return []

    async def list_page(
        kind: str, token: str | None = None, *, namespace: str | None = None
    ) -> tuple[list[Obj], str, str | None]:
        return [], "1", None

    fake.list_policies = list_policies  # type: ignore[attr-defined]
    fake.list_warm_pools = list_warm_pools  # type: ignore[attr-defined]
    fake.list_templates = list_templates  # type: ignore[attr-defined]
    fake.list_page = list_page  # type: ignore[attr-defined]
    rec = Reconciler(fake)  # type: ignore[arg-type]
    await reconcile(fake, rec)  # the session's watch event arrives first
    assert fake.claims == [] and "status" not in fake.session
    await rec.prime()
    await reconcile(fake, rec)
    assert fake.claims == []
    assert fake.session["status"]["phase"] == "Failed"


def _limited_reconciler() -> Reconciler:
    rec = Reconciler(Kube.__new__(Kube))
    rec.cache.loaded = True
    rec.cache.policies["tenant-a"]["cap"] = {
        "metadata": {"name": "cap", "namespace": "tenant-a"},
        "spec": {"cleanup": {"maxSessionsPerLabel": {"key": "team", "max": 1}}},
    }
    waiting_status = {
        "phase": "Failed",
        "conditions": [{"type": "Failed", "status": "True", "reason": "PolicyViolation", "message": "1 unfinished"}],
    }
    for name, minute, status in (("s1", 1, {"phase": "Ready"}), ("s2", 2, waiting_status)):
        rec.cache.sessions[("tenant-a", name)] = {
            "metadata": {
                "name": name,
                "namespace": "tenant-a",
                "uid": f"uid-{name}",
                "labels": {"team": "a"},
                "creationTimestamp": f"2025-01-01T10:0{minute}:00Z",
                "resourceVersion": "1",
            },
            "status": status,
        }
    return rec


async def test_a_freed_slot_wakes_the_sessions_waiting_for_it() -> None:
    """Item 5. Attack (on the tenant's own quota): s2 Failed over maxSessionsPerLabel was never re-checked
    when s1 went away, so it stayed Failed for good. Now the sessions behind a freed place in its label
    group are reconciled again when a session is deleted or finishes (decisions.quota.to_wake)."""
    rec = _limited_reconciler()
    rec.forget(("tenant-a", "s1"))
    assert rec.scheduler.due(("tenant-a", "s2")) is not None


async def test_a_finished_session_wakes_the_waiting_ones() -> None:
    rec = _limited_reconciler()
    finished = copy.deepcopy(rec.cache.sessions[("tenant-a", "s1")])
    finished["metadata"]["resourceVersion"] = "2"
    finished["status"] = {"phase": "Expired"}
    rec.remember_session(("tenant-a", "s1"), finished)
    assert rec.scheduler.due(("tenant-a", "s2")) is not None
    assert rec.scheduler.due(("tenant-a", "s1")) is None  # only those behind it: no O(n) storm
