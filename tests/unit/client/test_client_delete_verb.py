"""delete() without a path: the AgentSession goes, with a DeprecationWarning (issue 50 item 5)."""

from __future__ import annotations

import pytest

from langchain_k8s_client import AgentSessionSandbox


class _Session:
    deleted = 0

    def delete_session(self) -> bool:
        self.deleted += 1
        return True


def test_delete_without_a_path_warns_and_deletes_the_session() -> None:
    stub = _Session()
    with pytest.warns(DeprecationWarning, match="call delete_session()"):
        assert AgentSessionSandbox.delete(stub) is True  # type: ignore[arg-type]
    assert stub.deleted == 1
