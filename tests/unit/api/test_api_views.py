"""agentsession_api.views mirror the pydantic models of types.py key for key (by alias)."""

from __future__ import annotations

import pytest

from agentsession_api import types, views


@pytest.mark.parametrize(("view", "model"), sorted(views.MIRRORS.items()))
def test_every_view_has_exactly_the_model_s_fields(view: str, model: str) -> None:
    fields = {f.alias or name for name, f in getattr(types, model).model_fields.items()}
    keys = set(getattr(views, view).__annotations__)
    assert keys == fields, f"views.{view} vs types.{model}: missing {fields - keys}, unknown {keys - fields}"


def test_the_fork_source_ref_mirrors_forkfrom_too() -> None:
    assert set(views.NameRef.__annotations__) == set(types.ForkFrom.model_fields)
