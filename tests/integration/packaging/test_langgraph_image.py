"""The LangGraph Platform image of examples/langgraph installs the client (issue 52 item 4).

`langgraph dockerfile` is the CLI that LangGraph Platform and `langgraph build` use to turn langgraph.json
into an image; run as a user would, from the example's folder, it must copy in the repository's api and
client packages and install them with the graph (the client is what the graph imports).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.opskit.langgraph_dev import OFFLINE, SECRETS

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "langgraph"


def test_the_platform_image_installs_the_client_with_the_graph(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in SECRETS} | OFFLINE
    langgraph = Path(sys.executable).parent / "langgraph"
    out = subprocess.run(
        [str(langgraph), "dockerfile", str(tmp_path / "Dockerfile")],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    dockerfile = (tmp_path / "Dockerfile").read_text()
    # Each local package is its own build context, copied under /deps and pip-installed from there.
    for package, distribution in (("api", "agentsession-api"), ("client", "langchain-k8s-client")):
        assert f"COPY --from={package} . /deps/{package}" in dockerfile, dockerfile
        assert f"{package}={(EXAMPLE / '../..' / package).resolve()}" in out.stdout, out.stdout
        assert tomllib.loads((ROOT / package / "pyproject.toml").read_text())["project"]["name"] == distribution
    assert "for dep in /deps/*; do" in dockerfile and "uv pip install --system" in dockerfile, dockerfile
    assert '"agent": "/deps/outer-langgraph/src/thread_sandbox_graph.py:graph"' in dockerfile, dockerfile
