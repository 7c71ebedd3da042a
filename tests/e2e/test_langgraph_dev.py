"""The graph-per-thread pattern under the real `langgraph dev` server (issue 27): two threads through its
HTTP API, each with its own sandbox (AgentSession), and no traffic leaving the machine.

`langgraph dev` (langgraph-cli[inmem]) serves examples/langgraph/langgraph.json on a loopback port with
its version check, CLI analytics and LangSmith tracing off and no license key (so no metadata beacon);
tests/opskit/netguard/ refuses, and logs, any connection or name lookup off the machine in that process.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devcluster import ports
from devcluster.realnode import network
from langchain_k8s_client import AgentSessionSandbox
from langchain_k8s_client.manager import MANAGER_LABEL, MANAGER_VALUE, session_name
from tests.e2e.conftest import Kube, OperatorProcess
from tests.opskit.langgraph_dev import FLAGS, OFFLINE, SECRETS, user_venv

pytestmark = [pytest.mark.e2e, pytest.mark.node]  # a deep agent in a real pod

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "langgraph" / "langgraph.json"
NETGUARD = ROOT / "tests" / "opskit" / "netguard"


def _free_port() -> int:
    return ports.free_port()


@pytest.fixture
def server(kube: Kube, namespace: str, operator: OperatorProcess, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    kube.run("apply", "-n", namespace, "-f", str(ROOT / "examples" / "00-python-pool.yaml"))
    port = _free_port()
    netlog = tmp_path / "netguard.log"
    netlog.touch()
    env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    env.update(
        OFFLINE,
        KUBECONFIG=kube.kubeconfig,
        AGENTSESSION_NAMESPACE=namespace,
        AGENTSESSION_TTL="30m",
        NETGUARD_LOG=str(netlog),
        # The real node's pods and Services: inside the network namespace the cluster created.
        NETGUARD_ALLOW=f"{network.POD_CIDR},{network.SERVICE_CIDR}",
        PYTHONPATH=os.pathsep.join([str(NETGUARD), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    # The user's own install (pip from the package index), not this repository's virtualenv.
    langgraph = user_venv(ROOT, ROOT / ".cluster")
    # A copy: the graph path is relative to the working directory, where the in-memory runtime also
    # persists its state (.langgraph_api/), which must not land in the repository.
    app = tmp_path / "app"
    shutil.copytree(CONFIG.parent, app, ignore=shutil.ignore_patterns(".langgraph_api", "__pycache__"))
    log = (tmp_path / "langgraph-dev.log").open("wb")
    proc = subprocess.Popen(
        [
            str(langgraph),
            "dev",
            *FLAGS,
            "--port",
            str(port),
            "--no-reload",
            "--config",
            str(app / CONFIG.name),
        ],
        cwd=app,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (tmp_path / "langgraph-dev.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "langgraph-dev.log").read_text()[-3000:]
            time.sleep(0.5)
        yield url, netlog
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


def _run(url: str, thread_id: str) -> list[dict[str, Any]]:
    answer = httpx.post(
        f"{url}/threads/{thread_id}/runs/wait",
        json={"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "note the thread id"}]}},
        timeout=240,
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    # A run that raised answers 200 too, with the error instead of the state.
    assert "messages" in body, f"the run failed: {body}"
    return list(body["messages"])


def test_two_threads_get_two_sandboxes_under_langgraph_dev(
    kube: Kube, namespace: str, server: tuple[str, Path]
) -> None:
    url, netlog = server
    threads = [httpx.post(f"{url}/threads", json={}, timeout=30).json()["thread_id"] for _ in range(2)]
    for thread_id in threads:
        messages = _run(url, thread_id)
        tool_outputs = [m["content"] for m in messages if m["type"] == "tool"]
        assert any(thread_id in str(out) for out in tool_outputs), messages  # `cat` read back its own id

    listed = kube.run(
        "get",
        "agentsessions",
        "-n",
        namespace,
        "-l",
        f"{MANAGER_LABEL}={MANAGER_VALUE}",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ).stdout.split()
    assert sorted(listed) == sorted(session_name(t) for t in threads)
    pods = set()
    for thread_id in threads:
        session = kube.get("agentsession", session_name(thread_id), namespace) or {}
        pods.add(session["status"]["podName"])
        # As a client would: the thread's sandbox holds its own id, never the other thread's.
        sandbox = AgentSessionSandbox(session_name(thread_id), namespace, keep=True)
        assert sandbox.execute("cat /tmp/thread.txt").output.strip() == thread_id
    assert len(pods) == 2
    assert Path(f"{netlog}.loaded").read_text().strip(), "the network guard was not loaded in langgraph dev"
    assert netlog.read_text() == "", f"langgraph dev tried to leave the machine:\n{netlog.read_text()}"
