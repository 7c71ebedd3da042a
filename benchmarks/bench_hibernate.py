"""Hibernate against Suspend on the real node under gVisor (issue 33): idle -> asleep, and the wake.

Per round, interleaved (the order reversed every other round), two sessions of the python runtime's pool on
gVisor, each running the same python process (a few MB of its own heap) left to go idle:
- hibernate: `idleAction: Hibernate` (the node agent checkpoints the sandbox, then the Sandbox suspends);
- suspend: `idleAction: Suspend` (the pod deleted; the wake is a fresh pod, the process gone).

Measured: idle deadline -> phase Suspended with the pod gone ("asleep": for Hibernate, the checkpoint
included), the client's first call after it (`execute("true")`, which wakes the session: the call -> its
answer) and, for Hibernate, the image's size (status.hibernation.sizeBytes). Medians and p90s.
Run: `.venv/bin/python -m benchmarks.bench_hibernate [--rounds 3]` (root, real node, gVisor).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import time
from datetime import UTC, datetime
from typing import Any

os.environ.setdefault("DEVCLUSTER_NODE", "real")

from benchmarks.bench_gvisor import RUNTIMES, pool_manifests
from benchmarks.bench_resume import _p90, _wait
from benchmarks.common import create_namespace, load_average, start_operator, stop_operator, wait_pool_full
from devcluster import errors, nodeagent
from devcluster.cluster import Cluster, Paths
from devcluster.realnode import network

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)  # before the kubernetes client is imported

from kubernetes import client, config

from agentsession_api.timestamps import parse_time
from langchain_k8s_client import AgentSessionSandbox

NS = "bench-hibernate"
POOL = "gvisor"
ACTIONS = ("Hibernate", "Suspend")
# A python process holding ~8 MB of its own, so the image has a workload's worth of memory in it.
HOLDER = "nohup python3 -c 'import time; data = bytearray(8 << 20); time.sleep(10**6)' >/dev/null 2>&1 &"


def _asleep(cluster: Cluster, name: str, pod: str) -> dict[str, Any] | None:
    session = cluster.get_json("agentsession", name, NS) or {}
    status = session.get("status") or {}
    if status.get("phase") != "Suspended" or cluster.get_json("pod", pod, NS) is not None:
        return None
    return status


def _once(cluster: Cluster, name: str, action: str) -> dict[str, float]:
    backend = AgentSessionSandbox(name, NS, warm_pool=POOL, ttl="20m", idle_timeout="5s", idle_action=action)
    pod = backend.wait_ready().pod_name or ""
    assert backend.execute(HOLDER, timeout=5).exit_code == 0  # busy for its timeout only
    status: dict[str, Any] = {}

    def asleep() -> bool:
        nonlocal status
        status = _asleep(cluster, name, pod) or {}
        return bool(status)

    _wait(f"{name} asleep", asleep, timeout=180)
    asleep_at = time.time()
    deadline = (parse_time(status["idleDeadline"]) or datetime.now(UTC)).timestamp()
    record = status.get("hibernation") or {}
    if action == "Hibernate" and not record.get("hibernated"):
        raise RuntimeError(f"{name} did not hibernate: {record}")
    started = time.perf_counter()
    result = backend.execute("true")
    answered = time.perf_counter() - started
    assert result.exit_code == 0, result
    backend.delete_session()
    return {
        "idle deadline -> asleep": asleep_at - deadline,
        "wake: call -> answered": answered,
        "image MB": record.get("sizeBytes", 0) / 1e6 if action == "Hibernate" else float("nan"),
    }


def hibernating_operator(cluster: Cluster, namespaces: list[str], lease: str) -> subprocess.Popen[bytes]:
    """The node agent installed on the real node, and the operator (this checkout) watching `namespaces`
    with it: its checkpoints are real runsc ones."""
    nodeagent.install(cluster)
    watched = [arg for namespace in namespaces for arg in ("--namespace", namespace)]
    operator = start_operator(
        f"--cluster-cidr={network.POD_CIDR}",
        f"--cluster-cidr={network.SERVICE_CIDR}",
        f"--client-cidr={network.HOST_IP}/32",
        *nodeagent.operator_args(),
        *watched,
        "--lease-name",
        lease,
    )
    try:
        nodeagent.wait_ready(cluster)  # its certificate signed by the operator just started
    except BaseException:
        operator.terminate()
        operator.wait(timeout=30)
        raise
    return operator


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up(node="real")
    if cluster.node != "real" or not nodeagent.has_gvisor():
        raise SystemExit("bench_hibernate needs the real node with gVisor: stop the kwok cluster (make cluster-down)")
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "crds/")
    create_namespace(cluster, NS)
    docs = pool_manifests(POOL, RUNTIMES["gvisor"], 1)
    for doc in docs:
        doc["metadata"]["namespace"] = NS
    cluster.apply(docs)
    operator = hibernating_operator(cluster, [NS], "agentsession-bench-hibernate")
    config.load_kube_config()
    custom = client.CustomObjectsApi()
    results: dict[str, list[dict[str, float]]] = {a: [] for a in ACTIONS}
    loads = [load_average()]
    try:
        for i in range(args.rounds):
            for action in ACTIONS[:: 1 if i % 2 else -1]:
                wait_pool_full(custom, NS, POOL, 1, timeout=180)
                results[action].append(_once(cluster, f"{action.lower()[:3]}{i}", action))
                print(
                    f"round {i} {action}: " + ", ".join(f"{k} {v:.2f}" for k, v in results[action][-1].items()),
                    flush=True,
                )
            loads.append(load_average())
    finally:
        stop_operator(operator)
        cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        if started_cluster:
            cluster.down()
    print(f"\nHibernate vs Suspend, gVisor, python runtime, {args.rounds} rounds interleaved")
    print(f"(load {min(loads):.1f} to {max(loads):.1f}; seconds unless named; median / p90)")
    print(f"{'':<28}" + "".join(f" {a:>16}" for a in ACTIONS))
    for key in results[ACTIONS[0]][0]:
        cells = []
        for action in ACTIONS:
            values = [r[key] for r in results[action] if r[key] == r[key]]
            cells.append(f"{statistics.median(values):6.2f} / {_p90(values):5.2f}" if values else "-")
        print(f"{key:<28}" + "".join(f" {c:>16}" for c in cells))
    wake = {a: statistics.median(r["wake: call -> answered"] for r in results[a]) for a in ACTIONS}
    print(f"\nwake, Hibernate / Suspend: {wake['Hibernate'] / wake['Suspend']:.2f}")


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
