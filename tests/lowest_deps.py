"""The declared floors hold (issue 52 item 2): the four packages at the lowest versions they allow.

    python -m tests.lowest_deps [--venv DIR]

New virtualenvs (default .cluster/lowest-venv-*: the api alone, then all four) get api, client (with
its agent-sandbox extra), operator and nodeagent from this checkout, resolved by uv with `--resolution lowest-direct`:
each dependency a pyproject.toml names at the lowest version its range allows (their own dependencies at
their newest). The test tools go in at the versions of the development virtualenv, which runs this. It
prints each direct dependency's floor beside what was installed, imports the packages, then runs their
unit tests there. A floor a package cannot work with fails here, not at a user's.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
MODULES = {
    "api": "agentsession_api",
    "client": "langchain_k8s_client",
    "operator": "agentsession_operator",
    "nodeagent": "agentsession_nodeagent",
}
EXTRAS = {"api": "[codegen]", "client": "[agent-sandbox]"}
TEST_TOOLS = ("pytest", "pytest-asyncio", "pytest-timeout", "hypothesis")
"""Pinned to the development virtualenv's versions: the product's floors are under test, not pytest's (pyyaml
comes with api[codegen], at its floor)."""
SETS = (
    # The contract alone, as a tool built on it installs it (pydantic at its own floor), then the four
    # together (where the client's and the operator's dependencies raise some floors of the others).
    ("api", ("api",), ("tests/unit/api",)),
    (
        "all",
        ("api", "client", "operator", "nodeagent"),
        ("tests/unit/api", "tests/unit/client", "tests/unit/operator", "tests/unit/nodeagent"),
    ),
)
SOURCE_TREE_ONLY = (
    # They check files of the checkout that no package ships: the generated API reference beside the
    # models, and shellcheck's directives kept in the source folder of the in-pod scripts.
    "--ignore=tests/unit/api/test_api_apidoc.py",
    "--deselect=tests/unit/client/test_client_scripts.py::test_shellcheck_is_clean",
)


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(folders: tuple[str, ...]) -> list[tuple[str, Requirement]]:
    """(package folder, requirement) for every dependency the packages' pyproject.toml files declare."""
    found = []
    for folder in folders:
        project = tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]
        names = list(project["dependencies"])
        for extra in EXTRAS.get(folder, "").strip("[]").split(","):
            names += project.get("optional-dependencies", {}).get(extra, []) if extra else []
        found += [(folder, Requirement(r)) for r in names]
    return found


def floor(requirement: Requirement) -> str:
    lows = [s.version for s in requirement.specifier if s.operator in (">=", "==", "~=")]
    return lows[0] if lows else "(none)"


def run(*cmd: str | Path) -> None:
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT)


def installed(python: Path) -> dict[str, str]:
    listing = (
        "import importlib.metadata as m; "
        "print('\\n'.join(d.metadata['Name'] + ' ' + d.version for d in m.distributions()))"
    )
    out = subprocess.run([str(python), "-c", listing], capture_output=True, text=True, check=True).stdout
    return {normal(name): version for name, version in (line.split(" ", 1) for line in out.splitlines())}


def lowest(where: Path, folders: tuple[str, ...], tests: tuple[str, ...]) -> None:
    """One virtualenv: `folders` at their floors, their table, their imports, then `tests` there."""
    if where.exists():
        shutil.rmtree(where)
    venv.create(where, with_pip=True)
    python = where / "bin" / "python"
    run(python, "-m", "pip", "install", "-q", "uv")
    uv = where / "bin" / "uv"
    local = [f"./{folder}{EXTRAS.get(folder, '')}" for folder in folders]
    run(uv, "pip", "install", "--python", python, "--resolution", "lowest-direct", *local)
    run(uv, "pip", "install", "--python", python, *(f"{t}=={importlib.metadata.version(t)}" for t in TEST_TOOLS))
    versions = installed(python)
    print(f"\n{'package':<10} {'dependency':<22} {'floor':<10} installed")
    for folder, requirement in declared(folders):
        have = versions.get(normal(requirement.name), "MISSING")
        print(f"{folder:<10} {requirement.name:<22} {floor(requirement):<10} {have}")
    print(flush=True)
    run(python, "-c", "import " + ", ".join(MODULES[f] for f in folders))
    # The checkout's package folders are not on sys.path: the tests import what was installed.
    run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SOURCE_TREE_ONLY, *tests)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--venv", type=Path, default=ROOT / ".cluster" / "lowest-venv")
    args = parser.parse_args(argv)
    for label, folders, tests in SETS:
        lowest(args.venv.with_name(f"{args.venv.name}-{label}"), folders, tests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
