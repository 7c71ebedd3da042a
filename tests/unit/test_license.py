"""One license text, Apache-2.0: the root LICENSE and the copies each package ships."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON_PROJECTS = ("api", "client", "operator", "nodeagent")


def test_the_root_license_is_apache_2() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the full text, not a notice


@pytest.mark.parametrize("project", [*PYTHON_PROJECTS, "client-ts"])
def test_each_package_ships_a_copy_of_it(project: str) -> None:
    # A Python project may name no file outside its folder, npm packs only the package's own: a copy each.
    assert (ROOT / project / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes(), f"cp LICENSE {project}/"


@pytest.mark.parametrize("project", PYTHON_PROJECTS)
def test_each_distribution_names_it(project: str) -> None:
    meta = tomllib.loads((ROOT / project / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "Apache-2.0" and meta["license-files"] == ["LICENSE"]


def test_the_npm_package_names_it() -> None:
    package = json.loads((ROOT / "client-ts" / "package.json").read_text())
    assert package["license"] == "Apache-2.0" and "LICENSE" in package["files"]
