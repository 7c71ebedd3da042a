"""The client is its own distribution: importing it loads nothing of the operator's, and its metadata
lists none of the operator's dependencies (tests/integration/packaging installs it alone)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OPERATOR_ONLY = ("kopf", "structlog", "prometheus_client", "agentsession_operator")


def test_importing_the_client_loads_nothing_of_the_operator() -> None:
    code = (
        "import sys, langchain_k8s_client\n"
        "from langchain_k8s_client import AgentSessionSandbox, SessionManager\n"
        f"print(' '.join(m for m in {OPERATOR_ONLY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.split() == []


def test_client_dependencies_exclude_the_operators() -> None:
    deps = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {dep.split(">")[0].split("=")[0].split("<")[0].strip().lower() for dep in deps}
    assert not names & {"kopf", "structlog", "prometheus-client", "kubernetes-asyncio", "agentsession-operator"}
    assert "agentsession-api" in names
