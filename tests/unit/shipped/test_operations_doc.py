"""docs/operations.md's commands are the ones the tests run (the argocd-cm block: test_argocd_health.py)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from agentsession_operator.kube import preflight
from tests.opskit import langgraph_dev

ROOT = Path(__file__).resolve().parents[3]
DOC = (ROOT / "docs" / "operations.md").read_text()
VALUES = yaml.safe_load((ROOT / "charts" / "agentsession" / "values.yaml").read_text())


def _sh_blocks() -> list[str]:
    return [b.replace("\\\n", " ") for b in re.findall(r"```sh\n(.*?)```", DOC, re.S)]


def _words(command: str) -> list[str]:
    """The shell words of the one block that runs `command`."""
    (block,) = [b for b in _sh_blocks() if command in b]
    return shlex.split(block, comments=True)


def _value(path: str) -> Any:
    node: Any = VALUES
    for key in path.split("."):
        if not isinstance(node, dict):
            raise KeyError(path)
        if key not in node:
            if node == {}:  # a free-form map (labels): any key
                return None
            raise KeyError(f"{path}: no {key!r} in values.yaml")
        node = node[key]
    return node


def test_every_helm_set_in_the_doc_is_a_chart_value() -> None:
    words = _words("helm upgrade --install")
    sets = [words[i + 1] for i, w in enumerate(words) if w == "--set"]
    assert len(sets) == 4
    for assignment in sets:
        key, _, value = assignment.partition("=")
        _value(key)  # KeyError names a flag the chart does not have
        if key.endswith(".enabled"):
            assert _value(key) is False and value == "true", "monitoring is off by default, the doc turns it on"


def test_the_crd_upgrade_command_is_the_one_the_operator_names() -> None:
    assert preflight.CRD_UPGRADE_COMMAND in DOC
    assert any(preflight.CRD_UPGRADE_COMMAND in block for block in _sh_blocks())


def test_the_langgraph_dev_command_is_the_tested_one() -> None:
    words = _words("langgraph dev")
    env = dict(w.split("=", 1) for w in words if re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", w))
    assert {k: env[k] for k in langgraph_dev.OFFLINE if k in env} == langgraph_dev.OFFLINE
    dev = words[words.index("dev") :]
    flags = langgraph_dev.FLAGS
    assert all(flag in dev for flag in flags)
    assert dev[dev.index("--host") + 1] == "127.0.0.1"
    assert not set(env) & set(langgraph_dev.SECRETS)
