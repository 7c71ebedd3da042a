"""One version, written once per package (pyproject.toml, package.json, Chart.yaml) and read everywhere else."""

from __future__ import annotations

import importlib
import json
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = {
    "api": "agentsession_api",
    "client": "langchain_k8s_client",
    "operator": "agentsession_operator",
    "nodeagent": "agentsession_nodeagent",
}


def _project(folder: str) -> dict[str, Any]:
    return tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]


@pytest.mark.parametrize(("folder", "module"), DISTRIBUTIONS.items())
def test_dunder_version_is_the_installed_distributions(folder: str, module: str) -> None:
    # __version__ is read from the installed metadata, never written a second time.
    project = _project(folder)
    assert importlib.import_module(module).__version__ == metadata.version(project["name"]) == project["version"]


def test_the_released_pieces_share_one_version() -> None:
    """The image the chart installs, the packages beside it and the TypeScript twin move together."""
    versions = {folder: _project(folder)["version"] for folder in DISTRIBUTIONS}
    versions["charts/agentsession appVersion"] = yaml.safe_load((ROOT / "charts/agentsession/Chart.yaml").read_text())[
        "appVersion"
    ]
    versions["client-ts"] = json.loads((ROOT / "client-ts/package.json").read_text())["version"]
    assert len(set(versions.values())) == 1, versions


@pytest.mark.parametrize("folder", ["client", "operator", "nodeagent"])
def test_the_api_requirement_admits_the_api_version(folder: str) -> None:
    (requirement,) = [Requirement(r) for r in _project(folder)["dependencies"] if r.startswith("agentsession-api")]
    assert requirement.specifier.contains(_project("api")["version"])


@pytest.mark.parametrize("folder", DISTRIBUTIONS)
def test_every_0x_dependency_has_an_upper_bound(folder: str) -> None:
    """A 0.x project may break in its next minor (deepagents did within one): its floor alone does not hold."""
    project = _project(folder)
    requirements = [Requirement(r) for r in project["dependencies"]]
    requirements += [Requirement(r) for extra in project.get("optional-dependencies", {}).values() for r in extra]
    unbounded = [
        str(r)
        for r in requirements
        if any(s.operator == ">=" and s.version.startswith("0.") for s in r.specifier)
        and not any(s.operator in ("<", "<=", "~=", "==") for s in r.specifier)
    ]
    assert not unbounded, f"{folder}/pyproject.toml: give these an upper bound: {unbounded}"
