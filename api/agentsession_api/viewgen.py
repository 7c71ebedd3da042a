"""Generate read-only views of the API's bodies from the pydantic models (`types`), the one source.

``python -m agentsession_api.viewgen`` (run by `make crds`) writes ``views_generated.py``: for every model
reachable from ROOTS, a class ``<Model>View`` over the JSON mapping the API server sends (camelCase keys),
with one property per field under the model's own (snake_case) name. A property returns the stored value as
it is (None when absent: an empty allow-list and no allow-list stay apart), a time parsed (None when absent
or not RFC 3339), a nested model as its view (empty when absent; a view is true when its mapping is not
empty), a list of models as a list of views. Nothing is copied or validated: the operator decides over the
dicts it caches, and reads them through these names. ``--check`` writes nothing and exits 1 with a diff when
the committed file is stale; tests/unit/api/test_api_viewgen.py runs it.
"""

from __future__ import annotations

import datetime
import enum
import sys
import types as pytypes
import typing
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

from agentsession_api import types
from agentsession_api.tsgen import drift_of, generator_main

DEFAULT_OUT = Path(__file__).with_name("views_generated.py")
ROOTS: tuple[type[BaseModel], ...] = (
    types.AgentSessionSpec,
    types.AgentSessionPolicySpec,
    types.ResolvedSettings,
    types.Condition,
    types.LineageEntry,
)
"""What tenants write, and the settings in force the status records (the rest of the status has its
hand-written accessors in views.py: Status, Session)."""

HEADER = '''"""Read-only views of the API's bodies: generated from the pydantic models (agentsession_api.types) by
`python -m agentsession_api.viewgen`. Do not edit: change the models and run `make crds`."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agentsession_api.timestamps import parse_time


class _View:
    __slots__ = ("present", "raw")

    def __init__(self, raw: Mapping[str, Any] | None) -> None:
        self.present = isinstance(raw, Mapping)  # the body holds this part, maybe empty
        self.raw: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}

    def __bool__(self) -> bool:
        return bool(self.raw)'''


def _strip(annotation: object) -> object:
    """The annotation without Annotated[...] and without None in a union."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, pytypes.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _strip(args[0])
    return annotation


def _model(annotation: object) -> type[BaseModel] | None:
    found = _strip(annotation)
    return found if isinstance(found, type) and issubclass(found, BaseModel) else None


def _listed_model(annotation: object) -> type[BaseModel] | None:
    found = _strip(annotation)
    if typing.get_origin(found) is list:
        return _model(typing.get_args(found)[0])
    return None


def _python(annotation: object) -> str:
    """The JSON value's Python type, as text (Any where the shape is not plain)."""
    found = _strip(annotation)
    if isinstance(found, type) and issubclass(found, enum.Enum):
        return "str"
    if typing.get_origin(found) is typing.Literal:
        return "str"
    if found in (str, int, bool, float):
        return typing.cast(type, found).__name__
    if found is datetime.datetime:  # RFC 3339 text in JSON, parsed by the view
        return "datetime"
    if typing.get_origin(found) is list:
        return f"list[{_python(typing.get_args(found)[0])}]"
    if typing.get_origin(found) is dict:
        key, value = typing.get_args(found)
        return f"dict[{_python(key)}, {_python(value)}]"
    return "Any"


def _reachable() -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = []
    todo = list(ROOTS)
    while todo:
        model = todo.pop(0)
        if model in seen:
            continue
        seen.append(model)
        for field in model.model_fields.values():
            nested = _model(field.annotation) or _listed_model(field.annotation)
            if nested is not None and nested not in seen:
                todo.append(nested)
    return seen


def render() -> str:
    parts = [HEADER]
    for model in _reachable():
        lines = ["", "", f"class {model.__name__}View(_View):"]
        lines.append(f'    """A {model.__name__} (agentsession_api.types) as the API server sends it."""')
        lines += ["", "    __slots__ = ()"]
        for name, field in model.model_fields.items():
            key = field.alias or name
            nested, listed = _model(field.annotation), _listed_model(field.annotation)
            lines += ["", "    @property"]
            if nested is not None:
                lines.append(f"    def {name}(self) -> {nested.__name__}View:")
                lines.append(f'        return {nested.__name__}View(self.raw.get("{key}"))')
            elif listed is not None:
                lines.append(f"    def {name}(self) -> list[{listed.__name__}View]:")
                lines.append(f'        return [{listed.__name__}View(item) for item in self.raw.get("{key}") or []]')
            elif _python(field.annotation) == "datetime":
                lines.append(f"    def {name}(self) -> datetime | None:")
                lines.append(f'        return parse_time(self.raw.get("{key}"))')
            else:
                lines.append(f"    def {name}(self) -> {_python(field.annotation)} | None:")
                lines.append(f'        return self.raw.get("{key}")')
        parts.append("\n".join(lines))
    return "\n".join(parts) + "\n"


def drift(out: Path = DEFAULT_OUT) -> list[str]:
    """Unified diff between the committed file and a fresh one (empty: no drift)."""
    return drift_of(out, render())


def main(argv: Sequence[str] | None = None) -> int:
    return generator_main(
        argv,
        prog="python -m agentsession_api.viewgen",
        description=__doc__,
        default_out=DEFAULT_OUT,
        render=render,
        what="the API's views",
    )


if __name__ == "__main__":
    sys.exit(main())
