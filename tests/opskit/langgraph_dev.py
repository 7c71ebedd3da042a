"""How the tests (and docs/operations.md) run `langgraph dev` on a machine that must not phone home."""

from __future__ import annotations

import hashlib
import importlib.metadata
import shutil
import subprocess
import sys
import venv
from pathlib import Path

# Each turns off one thing langgraph dev would reach out for: the CLI's analytics, its version check on
# PyPI, LangSmith tracing (both spellings).
OFFLINE = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "true",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
}
# Unset: a key would turn on tracing, a real model, or the license metadata beacon.
SECRETS = (
    "LANGSMITH_API_KEY",
    "LANGCHAIN_API_KEY",
    "LANGGRAPH_CLOUD_LICENSE_KEY",
    "LANGSMITH_CONTROL_PLANE_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
)
# Loopback only, no browser. No --allow-blocking: the example graph never blocks the event loop, as
# LangGraph Platform requires.
FLAGS = ("--host", "127.0.0.1", "--no-browser")


def user_venv(root: Path, cache: Path) -> Path:
    """A virtualenv as a user makes one for `langgraph dev`: `pip install "langgraph-cli[inmem]" ./api ./client`
    (the packages from the checkout's folders, their dependencies from the package index at the versions the
    development virtualenv has, as constraints), not the repository's own. Built once per content of api/
    and client/ under `cache` (kept by the two e2e stages of one CI run); its `langgraph` command."""
    sources = subprocess.run(
        ["git", "ls-files", "api", "client"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    digest = hashlib.sha256(f"langgraph-cli {importlib.metadata.version('langgraph-cli')}".encode())
    for name in sorted(sources):
        path = root / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes())
    where = cache / f"langgraph-user-venv-{digest.hexdigest()[:12]}"
    ready = where / ".ready"
    if not ready.exists():
        shutil.rmtree(where, ignore_errors=True)
        venv.EnvBuilder(with_pip=True).create(where)
        frozen = subprocess.run(
            [sys.executable, "-m", "pip", "freeze", "--exclude-editable"], capture_output=True, text=True, check=True
        ).stdout
        constraints = where / "constraints.txt"
        constraints.write_text(frozen)
        subprocess.run(
            [
                str(where / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "-c",
                str(constraints),
                f"langgraph-cli[inmem]=={importlib.metadata.version('langgraph-cli')}",
                str(root / "api"),
                str(root / "client"),
            ],
            check=True,
            timeout=900,
        )
        ready.touch()
    return where / "bin" / "langgraph"
