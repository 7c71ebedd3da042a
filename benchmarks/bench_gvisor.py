"""runc against gVisor on the same real node (issue 29): one python-runtime session under each, the same
template but for `runtimeClassName: gvisor`, every measurement interleaved round by round.

Rows: `execute("true")`, grep over 1,000 files, 10 MiB upload and download (steady state, through
AgentSessionSandbox); claim -> Ready warm (adopted from a full pool) and cold (env forces a new sandbox);
the node's memory per idle sandbox (the pod's memory cgroup's working set: everything runsc's sandbox,
gofer and the workload hold). Prints medians and the gVisor/runc ratio.
Run: `.venv/bin/python -m benchmarks.bench_gvisor [--rounds 10]` (starts the real node if none is up).
"""

from __future__ import annotations

import argparse
import copy
import functools
import http.client
import io
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import create_namespace, interleaved_ms, start_operator, stop_operator, wait_pool_full
from devcluster import errors
from devcluster.cluster import Cluster, Paths
from devcluster.realnode import configs, network

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)  # before the kubernetes client is imported

from kubernetes import client, config

from langchain_k8s_client import AgentSessionSandbox

NS = "bench-gvisor"
ROOT = Path(__file__).parents[1]
RUNTIMES = {"runc": None, "gvisor": configs.GVISOR_RUNTIME_CLASS}
MIB = 1024 * 1024
SPLIT = {  # raw POSTs to the runtime: what each layer of execute("true") costs on its own
    "  raw POST `true` (one exec, no shell)": "true",
    "  raw POST `sh -c true`": "sh -c true",
    "  raw POST `sh -c '( true )'` (+ a fork)": "sh -c '( true )'",
    "  raw POST the watchdog chain": "sh -c 'timeout -s KILL 100 sh -c true & wait $!'",
}


def raw_post(ip: str, command: str) -> Callable[[], None]:
    """One keep-alive POST of `command` to the runtime's /execute (the body encoded once; a connection of
    its own, opened by the warm-up call)."""
    body = json.dumps({"command": command}).encode()
    conn = http.client.HTTPConnection(ip, 8888, timeout=60)

    def post() -> None:
        conn.request("POST", "/execute", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        payload = response.read()
        if response.status != 200 or json.loads(payload).get("exit_code") != 0:
            raise RuntimeError(f"{command}: {response.status} {payload[:200]!r}")

    return post


def pool_manifests(name: str, runtime_class: str | None, replicas: int) -> list[dict[str, Any]]:
    """examples/00-python-pool.yaml under another name, on the given runtime."""
    template, pool = (d for d in yaml.safe_load_all((ROOT / "examples" / "00-python-pool.yaml").read_text()) if d)
    template, pool = copy.deepcopy(template), copy.deepcopy(pool)
    template["metadata"]["name"] = name
    if runtime_class:
        template["spec"]["podTemplate"]["spec"]["runtimeClassName"] = runtime_class
    pool["metadata"]["name"] = name
    pool["spec"] = {"replicas": replicas, "sandboxTemplateRef": {"name": name}}
    return [template, pool]


def pod_memory_mib(pod: dict[str, Any]) -> float:
    """The pod's working set (v1 memory cgroup: usage minus inactive file pages, as the kubelet counts it),
    in MiB. Not usage minus all cache: gVisor keeps the workload's memory in the Sentry's memfd, which the
    cgroup counts as cache (shmem)."""
    uid = pod["metadata"]["uid"]
    qos = pod["status"].get("qosClass", "BestEffort").lower()
    base = Path("/sys/fs/cgroup/memory") / configs.CGROUP_PARENT / "kubepods"
    cgroup = (base if qos == "guaranteed" else base / qos) / f"pod{uid}"
    stat = dict(line.split() for line in (cgroup / "memory.stat").read_text().splitlines())
    usage = int((cgroup / "memory.usage_in_bytes").read_text())
    return (usage - int(stat.get("total_inactive_file", 0))) / MIB


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10, help="rounds of the steady-state rows")
    parser.add_argument("--start-rounds", type=int, default=5, help="rounds of claim -> Ready, warm and cold")
    args = parser.parse_args()
    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up(node="real")
    if cluster.node != "real":
        raise SystemExit("bench_gvisor needs the real node: stop the kwok cluster first (make cluster-down)")
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", f"{ROOT}/crds")
    create_namespace(cluster, NS)
    for name, runtime_class in RUNTIMES.items():
        cluster.apply(_in_namespace(pool_manifests(name, runtime_class, 1)))
    operator = start_operator(
        f"--cluster-cidr={network.POD_CIDR}",
        f"--cluster-cidr={network.SERVICE_CIDR}",
        f"--client-cidr={network.HOST_IP}/32",  # this script is the sessions' client
    )
    config.load_kube_config()
    custom = client.CustomObjectsApi()
    try:
        rows: list[tuple[str, float, float]] = []
        sessions = {name: AgentSessionSandbox(f"steady-{name}", NS, warm_pool=name, ttl="1h") for name in RUNTIMES}
        for backend in sessions.values():
            backend.wait_ready()
            backend.execute("true")
        n = args.rounds

        def each(fn: Callable[[AgentSessionSandbox], object]) -> dict[str, Callable[[], object]]:
            return {name: functools.partial(fn, backend) for name, backend in sessions.items()}

        def row(label: str, ms: dict[str, float]) -> None:
            rows.append((label, ms["runc"], ms["gvisor"]))

        row('execute("true")', interleaved_ms(each(lambda b: b.execute("true")), n))
        # Where execute's time goes: the same pod POSTed raw (keep-alive), from the runtime's bare process
        # start to the process chain of the watchdog wrapper (`timeout` and the command's `sh`).
        ips = {name: b.session.pod_ips[0] for name, b in sessions.items()}
        for label, command in SPLIT.items():
            row(label, interleaved_ms({name: raw_post(ip, command) for name, ip in ips.items()}, n))
        make = 'mkdir -p /tmp/g && cd /tmp/g && for i in $(seq 1 1000); do echo "line $i needle" > f$i.txt; done'
        for backend in sessions.values():
            assert backend.execute(make, timeout=180).exit_code == 0
            assert len(backend.grep("needle", "/tmp/g").matches or []) == 1000
        row("grep over 1,000 files", interleaved_ms(each(lambda b: b.grep("needle", "/tmp/g")), n))
        raw_grep = "grep -rHnIF --null -m 1000 needle /tmp/g"  # grep alone: no shell, head or watchdog
        row("  raw POST `grep -r` (one exec)", interleaved_ms({k: raw_post(ip, raw_grep) for k, ip in ips.items()}, n))
        blob = os.urandom(10 * MIB)
        row("upload 10 MiB", interleaved_ms(each(lambda b: b.upload_files([("/tmp/blob", blob)])), n))
        for backend in sessions.values():
            assert backend.download_files(["/tmp/blob"])[0].content == blob
        row("download 10 MiB", interleaved_ms(each(lambda b: b.download_files(["/tmp/blob"])), n))

        warm: dict[str, list[float]] = {name: [] for name in RUNTIMES}
        cold: dict[str, list[float]] = {name: [] for name in RUNTIMES}
        for i in range(args.start_rounds):
            order = list(RUNTIMES) if i % 2 else list(RUNTIMES)[::-1]
            for name in order:
                wait_pool_full(custom, NS, name, 1, timeout=180)
                warm[name].append(claim_to_ready(f"w{i}-{name}", name))
                cold[name].append(claim_to_ready(f"c{i}-{name}", name, env={"COLD": "1"}))
        row("claim -> Ready, warm", {k: 1000 * median(v) for k, v in warm.items()})
        row("claim -> Ready, cold", {k: 1000 * median(v) for k, v in cold.items()})

        memory = {}
        for name, backend in sessions.items():
            pod = cluster.get_json("pod", backend.session.pod_name or "", NS)
            assert pod is not None
            memory[name] = pod_memory_mib(pod)
        rows.append(("node memory per idle sandbox (MiB)", memory["runc"], memory["gvisor"]))

        print(
            f"runc vs gVisor ({configs.GVISOR_PLATFORM}) on the real node, medians in ms ({n} rounds steady, "
            f"{args.start_rounds} rounds claim -> Ready)"
        )
        print(f"{'':<36} {'runc':>10} {'gVisor':>10} {'gVisor/runc':>12}")
        for label, runc, gvisor in rows:
            print(f"{label:<36} {runc:>10.1f} {gvisor:>10.1f} {gvisor / runc:>12.2f}")
        for backend in sessions.values():
            backend.delete_session()
    finally:
        stop_operator(operator)
        cluster.kubectl("delete", "namespace", NS, "--wait=false")
        if started_cluster:
            cluster.down()


def _in_namespace(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for doc in docs:
        doc["metadata"]["namespace"] = NS
    return docs


def claim_to_ready(session: str, pool: str, env: dict[str, str] | None = None, namespace: str = NS) -> float:
    """Seconds from the session's creation to Ready (what the client's first call waits for)."""
    started = time.perf_counter()
    backend = AgentSessionSandbox(session, namespace, warm_pool=pool, ttl="10m", env=env)
    backend.wait_ready()
    elapsed = time.perf_counter() - started
    backend.delete_session()
    return elapsed


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
