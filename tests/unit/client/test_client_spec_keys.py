"""The session spec the client writes is spelled by the api package's types (one source with the CRD)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import BaseModel, create_model

from agentsession_api.types import AgentSessionSpec
from langchain_k8s_client import sessions
from langchain_k8s_client.sessions import SessionSpec


def _every_field() -> SessionSpec:
    return SessionSpec(
        warm_pool="pool",
        ttl="1h",
        idle_timeout="10m",
        idle_action="Suspend",
        env={"A": "1"},
        labels={"team": "x"},
        pod_labels={"app": "y"},
        pod_annotations={"note": "z"},
        volume_claim_templates=[
            {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}}
        ],
        fork_from=None,
    )


def test_every_field_the_client_sets_validates_against_the_api_types() -> None:
    spec = _every_field().to_spec()
    assert set(spec) == {
        "warmPoolRef", "ttl", "idleTimeout", "idleAction", "env", "labels", "podLabels", "podAnnotations",
        "volumeClaimTemplates",
    }  # fmt: skip
    AgentSessionSpec.model_validate(spec)  # extra="forbid": an unknown key would fail here
    fork = SessionSpec(warm_pool="pool", fork_from="src").to_spec()
    assert AgentSessionSpec.model_validate(fork).fork_from is not None


def _spec_type(changes: dict[str, tuple[str, str]]) -> type[BaseModel]:
    """AgentSessionSpec with fields renamed or given another wire name: {field: (new field, new alias)}."""
    fields: dict[str, Any] = {}
    for name, info in AgentSessionSpec.model_fields.items():
        info = copy.copy(info)
        new_name, info.alias = changes.get(name, (name, info.alias or name))
        fields[new_name] = (info.annotation, info)
    return create_model("Variant", **fields)


@pytest.fixture
def api_types(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[type[BaseModel]], None]]:
    def use(spec_type: type[BaseModel]) -> None:
        monkeypatch.setattr(sessions, "AgentSessionSpec", spec_type)
        sessions.spec_keys.cache_clear()

    yield use
    sessions.spec_keys.cache_clear()


def test_a_renamed_api_field_fails(api_types: Callable[[type[BaseModel]], None]) -> None:
    api_types(_spec_type({"idle_timeout": ("idle_after", "idleAfter")}))
    with pytest.raises(KeyError, match="idle_timeout"):
        SessionSpec(warm_pool="pool").to_spec()


def test_a_changed_wire_name_is_followed(api_types: Callable[[type[BaseModel]], None]) -> None:
    api_types(_spec_type({"ttl": ("ttl", "timeToLive")}))
    assert SessionSpec(ttl="1h").to_spec() == {"timeToLive": "1h"}
