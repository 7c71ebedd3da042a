"""The UID-fenced status write (kube.client.Kube.patch_session_status) against a fake custom-objects API that
behaves as the API server does for JSON patches: a failed test op, a missing /status and a schema refusal all
answer 422. The races here are the ones a real API server showed in CI: another writer adds or removes the status
between our refused write and the read after it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentsession_operator.kube import client as kube_client
from agentsession_operator.kube.api import ApiException


class JsonPatchCustom:
    """One session; `between` runs after a refused patch, before the caller reads again (the other writer)."""

    def __init__(self, session: dict[str, Any]) -> None:
        self.session = session
        self.between: list[dict[str, Any] | None] = []  # the status another writer leaves, per refusal
        self.patches = 0

    async def call(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        """ApiClient.call: a GET of the session, or a JSON patch of its status."""
        if method == "GET":
            return copy.deepcopy(self.session)
        assert method == "PATCH" and path.endswith("/status") and kw["content_type"] == "application/json-patch+json"
        self.patches += 1
        ops = kw["body"]
        doc = copy.deepcopy(self.session)
        for op in ops:
            if op["op"] == "test":
                if doc["metadata"]["uid"] != op["value"]:
                    raise self._refuse()
                continue
            path = op["path"].split("/")[1:]
            if path == ["status"]:
                doc["status"] = op["value"]
            elif "status" not in doc:
                raise self._refuse()  # RFC 6902: the parent of an added member must exist
            elif op["value"] == "refused-by-schema":
                raise self._refuse()
            else:
                doc["status"][path[1]] = op["value"]
        self.session = doc
        return copy.deepcopy(doc)

    def _refuse(self) -> ApiException:
        if self.between:
            status = self.between.pop(0)
            if status is None:
                self.session.pop("status", None)
            else:
                self.session["status"] = status
        return ApiException(status=422, reason="Unprocessable Entity")


def _kube(custom: JsonPatchCustom) -> kube_client.Kube:
    return kube_client.Kube(custom)  # type: ignore[arg-type]


async def test_a_status_written_by_another_between_the_refusal_and_the_read_is_added_to() -> None:
    """CI (kwok): the caller thought the status existed, it had been removed (422), and the operator wrote one
    again before the read. The old code raised; now the write is made once more, as the server has it now."""
    custom = JsonPatchCustom({"metadata": {"uid": "u-2"}})
    custom.between = [{"phase": "Pending", "observedGeneration": 1}]
    written = await _kube(custom).patch_session_status("ns", "again", {"phase": "Expired"}, "u-2", has_status=True)
    assert written is not None and written["status"] == {"phase": "Expired", "observedGeneration": 1}
    assert custom.patches == 2


async def test_a_status_that_is_gone_is_added_whole() -> None:
    custom = JsonPatchCustom({"metadata": {"uid": "u-2"}})
    written = await _kube(custom).patch_session_status("ns", "again", {"phase": "Expired"}, "u-2", has_status=True)
    assert written is not None and written["status"] == {"phase": "Expired"}


async def test_a_write_for_another_session_of_the_name_lands_nowhere() -> None:
    custom = JsonPatchCustom({"metadata": {"uid": "u-2"}, "status": {"phase": "Pending"}})
    assert await _kube(custom).patch_session_status("ns", "again", {"phase": "Expired"}, "u-1") is None
    assert custom.session["status"] == {"phase": "Pending"}


async def test_a_body_the_schema_refuses_is_raised_after_the_second_try() -> None:
    """A refusal that is the body's own is never hidden: the second try, shaped as the server has it, is
    refused too, and raised."""
    custom = JsonPatchCustom({"metadata": {"uid": "u-2"}, "status": {"phase": "Pending"}})
    with pytest.raises(ApiException):
        await _kube(custom).patch_session_status("ns", "again", {"phase": "refused-by-schema"}, "u-2")
    assert custom.patches == 2
    assert custom.session["status"] == {"phase": "Pending"}
