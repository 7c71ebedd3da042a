"""The runtime process of a Ready session killed (SIGKILL), on either node.

kwok node: the pod runner's process group (its pid file). Real node: the container's init process,
through the runtime (`runc kill`, the runc root containerd uses), as the OOM killer or a crash would.
In both cases the pod stays and its container is restarted (restartPolicy Always, after a back-off).

Checked: a command in flight raises a typed error (never an empty result); the session reports it
(phase Provisioning, Ready=False with reason SandboxUnavailable); a client call meanwhile raises a typed
error or, once the pod is back, answers for real; the session is Ready again and the workspace
(an emptyDir: it outlives a container restart) is still there.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from devcluster.cluster import Cluster, node_kind
from devcluster.realnode.configs import NodeDirs
from langchain_k8s_client import AgentSessionSandbox, SandboxError
from langchain_k8s_client.errors import TransportError
from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = [pytest.mark.e2e, pytest.mark.faults, pytest.mark.realfaults]
EXAMPLES = Path(__file__).parents[2] / "examples"


def kill_runtime(kube: Kube, cluster: Cluster, namespace: str, pod_name: str) -> str:
    """SIGKILL the runtime process of the pod's (only) container; returns how."""
    if node_kind() == "kwok":
        pidfile = next(cluster.paths.pods.glob(f"{namespace}_{pod_name}_*/pid"))
        os.killpg(int(pidfile.read_text()), signal.SIGKILL)
        return f"kill -KILL -{pidfile.read_text().strip()} (the pod runner's process group)"
    pod = kube.get("pod", pod_name, namespace)
    assert pod is not None
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    runc_root = NodeDirs(cluster.paths.root / "node").containerd / "runc"
    for root in [runc_root, *runc_root.glob("*")]:
        proc = subprocess.run(["runc", f"--root={root}", "kill", container_id, "KILL"], capture_output=True, text=True)
        if proc.returncode == 0:
            return f"runc --root={root} kill {container_id[:12]} KILL"
    raise AssertionError(f"runc found no container {container_id}")


def test_runtime_killed_under_a_ready_session(
    kube: Kube, cluster: Cluster, namespace: str, operator: OperatorProcess
) -> None:
    kube.run("apply", "-n", namespace, "-f", str(EXAMPLES / "00-python-pool.yaml"))
    with AgentSessionSandbox("victim", namespace, warm_pool="python-pool", ttl="1h", ready_timeout=120) as sandbox:
        assert sandbox.execute("echo hi").output.strip() == "hi"
        assert sandbox.write("/workspace/keep.txt", "kept\n").error is None
        pod_name = sandbox.session.pod_name or sandbox.session.sandbox_name
        assert pod_name
        restarts_before = _restarts(kube, namespace, pod_name)

        in_flight: dict[str, Any] = {}

        def long_command() -> None:
            try:
                in_flight["result"] = sandbox.execute("sleep 30; echo done", timeout=60)
            except Exception as exc:  # what the caller would see
                in_flight["error"] = exc

        worker = threading.Thread(target=long_command)
        worker.start()
        # Killed only once the command runs in the pod: its `sleep 30` seen in the pod's /proc by a second
        # client of the session (as another replica of an app would be; its own connection).
        running = (
            "import os\n"
            "def cmd(p):\n"
            "    try:\n"
            "        return open(f'/proc/{p}/cmdline', 'rb').read()\n"
            "    except OSError:\n"
            "        return b''\n"
            "print(sum(cmd(p) == b'sleep\\x0030\\x00' for p in os.listdir('/proc') if p.isdigit()))\n"
        )
        with AgentSessionSandbox("victim", namespace) as watcher:
            kube.wait_for(
                "the long command running in the pod",
                lambda: (
                    watcher.execute(f"python3 -c {shlex.quote(running)}", timeout=10).output.strip() not in ("", "0")
                ),
                timeout=30,
                interval=0.2,
            )
        how = kill_runtime(kube, cluster, namespace, pod_name)
        killed = time.monotonic()
        worker.join(timeout=60)
        assert "result" not in in_flight, f"a killed command returned a result: {in_flight['result']!r}"
        error = in_flight["error"]
        assert isinstance(error, TransportError) and error.maybe_delivered, repr(error)
        print(f"killed with {how}; the command in flight raised {type(error).__name__}: {error}")

        # The session says so.
        def unavailable() -> dict[str, Any] | None:
            body = kube.get("agentsession", "victim", namespace)
            cond = kube.condition(body, "Ready")
            if body and cond and cond.get("reason") == "SandboxUnavailable":
                return {"phase": body["status"]["phase"], **cond}
            return None

        reported = kube.wait_for("the session reporting SandboxUnavailable", unavailable, timeout=60, interval=0.5)
        noticed = time.monotonic() - killed
        assert reported["phase"] == "Provisioning" and reported["status"] == "False", reported
        print(f"reported after {noticed:.1f} s: {reported['phase']}, {reported['reason']}: {reported['message']}")

        # A call meanwhile (a second client, short ready_timeout): a typed error, or a real answer.
        with AgentSessionSandbox("victim", namespace, keep=True, ready_timeout=2) as other:
            try:
                answer = other.execute("echo meanwhile")
                assert answer.output.strip() == "meanwhile", repr(answer)
                meanwhile = "answered (already back)"
            except SandboxError as exc:
                meanwhile = f"{type(exc).__name__}: {exc}"
        print("a call meanwhile:", meanwhile)

        kube.wait_for(
            "the session Ready again",
            lambda: ((kube.get("agentsession", "victim", namespace) or {}).get("status") or {}).get("phase") == "Ready",
            timeout=180,
            interval=0.5,
        )
        recovered = time.monotonic() - killed
        # The same client works again: its reads wait for Ready and re-resolve the pod.
        assert sandbox.execute("cat /workspace/keep.txt").output.strip() == "kept"
        assert _restarts(kube, namespace, pod_name) > restarts_before
        print(f"Ready again {recovered:.1f} s after the kill; the workspace survived; container restarted")


def _restarts(kube: Kube, namespace: str, pod_name: str) -> int:
    pod = kube.get("pod", pod_name, namespace) or {}
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return int(statuses[0].get("restartCount") or 0)
