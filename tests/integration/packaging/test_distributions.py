"""The distributions install and import on their own (pip from PyPI for their dependencies).

The client is what users `pip install`: in a fresh virtualenv it must install with only the API
package beside it, and import without kopf, structlog or prometheus-client anywhere in the venv.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
OPERATOR_ONLY = ("kopf", "structlog", "prometheus_client")


def _sources(tmp: Path, *projects: str) -> list[str]:
    """Copies of the projects: pip builds in the tree it is given, and must leave ours clean."""
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    return [str(shutil.copytree(ROOT / p, tmp / p, ignore=ignore)) for p in projects]


def _venv(path: Path) -> Path:
    venv.EnvBuilder(with_pip=True).create(path)
    return path / "bin" / "python"


def _pip(python: Path, *args: str) -> None:
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def _run(python: Path, code: str) -> str:
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("client")
    python = _venv(tmp / "venv")
    _pip(python, *_sources(tmp, "api", "client"))
    return python


def test_client_installs_alone_without_the_operators_dependencies(client_venv: Path) -> None:
    present = _run(
        client_venv,
        f"import importlib.util as u; print(' '.join(m for m in {OPERATOR_ONLY!r} if u.find_spec(m)))",
    )
    assert present.split() == [], f"installed with the client: {present}"


def test_client_imports_without_kopf(client_venv: Path) -> None:
    loaded = _run(
        client_venv,
        "import sys, langchain_k8s_client\n"
        "from langchain_k8s_client import AgentSessionSandbox, SessionManager, PodSandbox\n"
        f"print(' '.join(m for m in {OPERATOR_ONLY!r} if m in sys.modules))",
    )
    assert loaded.split() == []


def test_api_package_needs_only_pydantic(tmp_path: Path) -> None:
    python = _venv(tmp_path / "venv")
    _pip(python, *_sources(tmp_path, "api"))
    out = _run(
        python,
        "import importlib.metadata as m, agentsession_api.types, agentsession_api.activity\n"
        "print(sorted(r.split('>')[0].split(';')[0] for r in m.requires('agentsession-api') if 'extra' not in r))",
    )
    assert out.strip() == "['pydantic']"


@pytest.mark.parametrize("project", ["api", "client", "operator", "nodeagent"])
def test_wheel_and_sdist_carry_the_license(tmp_path: Path, project: str) -> None:
    (source,) = _sources(tmp_path, project)
    dist = tmp_path / "dist"
    dist.mkdir()
    # setuptools' PEP 517 hooks, what pip and `python -m build` call (no index needed); they rewrite sys.argv.
    code = "from setuptools import build_meta as b; import sys; d = sys.argv[1]; b.build_wheel(d); b.build_sdist(d)"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(dist)], capture_output=True, text=True, timeout=300, cwd=source
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = dist.glob("*.whl")
    members = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in members)
    if project == "operator":  # the node agent, a privileged DaemonSet's program, is its own wheel (issue 50)
        assert not [n for n in members if "nodeagent" in n], members
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        assert any(n.endswith("/LICENSE") for n in tar.getnames())
