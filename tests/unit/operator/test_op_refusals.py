"""A claim create refused with a 4xx: the session's status says why before the pass fails (issue 12)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from agentsession_operator.decisions import refusals
from agentsession_operator.kube.api import ApiException
from agentsession_operator.kube.reconciler import Reconciler


class RefusingKube:
    """Just enough of kube.client.Kube for one pass that wants to create a claim."""

    def __init__(self, session: dict[str, Any], status: int, message: str) -> None:
        self.session = session
        self.status, self.message = status, message
        self.status_patches: list[dict[str, Any]] = []

    async def get_session(self, namespace: str, name: str) -> dict[str, Any]:
        return self.session

    async def get_claim(self, namespace: str, name: str) -> None:
        return None

    async def get_sandbox(self, namespace: str, name: str) -> None:
        return None

    async def get_warm_pool(self, namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name}}

    async def allowed_label_domains(self, namespace: str, name: str) -> list[str]:
        return []

    async def create_claim(self, claim: dict[str, Any]) -> None:
        exc = ApiException(status=self.status, reason="Refused")
        exc.body = json.dumps({"kind": "Status", "message": self.message}).encode()
        raise exc

    async def patch_session_status(
        self, namespace: str, name: str, status: dict[str, Any], uid: str | None = None, has_status: bool = True
    ) -> dict[str, Any]:
        self.status_patches.append(status)
        return {**self.session, "status": status}

    async def event(self, *args: Any) -> None:
        return None


@pytest.mark.parametrize("code", [400, 403, 422])
async def test_refused_claim_create_is_on_the_status(make_session: Callable[..., dict[str, Any]], code: int) -> None:
    session = make_session()
    kube = RefusingKube(session, code, 'admission webhook "quota" denied the request: too many claims')
    reconciler = Reconciler(kube)  # type: ignore[arg-type]
    reconciler.cache.loaded = True  # as after prime() at startup
    await reconciler.reconcile(("ns", "demo"), cause="test", fresh=True)
    assert kube.status_patches, "nothing written: the pass aborted before the status"
    ready = next(c for c in kube.status_patches[-1]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "ClaimRefused"
    assert f"HTTP {code}" in ready["message"] and "too many claims" in ready["message"]
    assert reconciler.scheduler.due(("ns", "demo")) is not None  # and retried with backoff


async def test_other_errors_are_not_refusals(make_session: Callable[..., dict[str, Any]]) -> None:
    kube = RefusingKube(make_session(), 500, "etcd timeout")
    reconciler = Reconciler(kube)  # type: ignore[arg-type]
    reconciler.cache.loaded = True  # as after prime() at startup
    await reconciler.reconcile(("ns", "demo"), cause="test", fresh=True)
    assert not any(c.get("reason") == "ClaimRefused" for p in kube.status_patches for c in p.get("conditions") or [])
    assert reconciler.scheduler.due(("ns", "demo")) is not None


def test_is_refusal_and_message() -> None:
    assert [refusals.is_refusal(c) for c in (400, 403, 404, 409, 422, 429, 500, None)] == [
        True, True, False, False, True, False, False, False,
    ]  # fmt: skip
    assert refusals.api_message(b'{"message": "no"}') == "no"
    assert refusals.api_message(b"plain text") == "plain text"
    patch = refusals.refusal_status(
        {"metadata": {}}, None, "create", 403, "forbidden", datetime(2026, 1, 1, tzinfo=UTC)
    )
    assert patch["phase"] == "Pending" and patch["conditions"][0]["reason"] == "ClaimRefused"
