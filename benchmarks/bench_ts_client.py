"""The TypeScript client's `execute("true")` beside a raw keep-alive POST from Node and the Python client.

One AgentSession pod; interleaved rounds (the order reversed every other round), each a batch of calls of
one kind: `AgentSessionSandbox.execute("true")` from client-ts, a keep-alive POST of `sh -c true` to the
same runtime from Node (the floor a Node client can reach), and the Python client's `execute("true")`.
The Node calls are timed inside Node (client-ts/e2e/bench.ts), the Python ones here. Prints medians and
ratios. Run: `.venv/bin/python -m benchmarks.bench_ts_client [--rounds 20 --batch 10]` (builds client-ts).

Measured on the kwok node, 2 shared and busy cores, 20 x 10 calls. Before: client-ts 1.21x / 1.23x / 1.28x
Node's raw POST; Node's own POST of the staged wrapper cost what `sh -c true` did (1.00x: nothing in the pod),
transport.script of it 1.06x, so the gap was in execute's own work: building and SHA-256-hashing the wrapper
script on every call (0.2 ms) and entering an AsyncLocalStorage context (0.1 ms), both now gone (the wrapper is
built once per kind). After, two runs: client-ts 8.97 / 20.72 ms against 9.44 / 19.25 ms (0.95x / 1.08x),
the Python client 1.35x / 0.91x (the machine's load moves every row; the ratios of one run are what count).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks.common import create_namespace, start_operator, stop_operator
from devcluster.cluster import Cluster, Paths

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)  # before the kubernetes client is imported

from langchain_k8s_client import AgentSessionSandbox

NS = "bench-ts-client"
ROOT = Path(__file__).resolve().parents[1]
CLIENT_TS = ROOT / "client-ts"


class NodeSide:
    """client-ts/e2e/bench.ts as a child process: `call(kind, n)` returns the milliseconds of n calls."""

    def __init__(self, namespace: str, name: str) -> None:
        self.proc = subprocess.Popen(
            ["node", str(CLIENT_TS / "dist" / "e2e" / "bench.js"), namespace, name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("client-ts bench side did not start")

    def call(self, kind: str, count: int) -> list[float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{kind} {count}\n")
        self.proc.stdin.flush()
        return list(json.loads(self.proc.stdout.readline()))

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batch", type=int, default=10, help="calls of one kind per round")
    args = parser.parse_args()
    subprocess.run(["npm", "run", "build"], cwd=CLIENT_TS, check=True, capture_output=True)
    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up()
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", f"{ROOT}/crds")
    create_namespace(cluster, NS)
    cluster.kubectl("apply", "-n", NS, "-f", f"{ROOT}/examples/00-python-pool.yaml")
    operator = start_operator()
    node: NodeSide | None = None
    try:
        py = AgentSessionSandbox("bench", NS, warm_pool="python-pool", ttl="1h")
        py.wait_ready()
        py.execute("true")
        node = NodeSide(NS, "bench")

        def python_calls(count: int) -> list[float]:
            times = []
            for _ in range(count):
                started = time.perf_counter()
                py.execute("true")
                times.append(1000 * (time.perf_counter() - started))
            return times

        kinds = {
            "client-ts": lambda n: node.call("ts", n),
            "node raw POST": lambda n: node.call("raw", n),
            "node POST wrapper": lambda n: node.call("wrapped", n),
            "ts script wrapper": lambda n: node.call("script", n),
            "python client": python_calls,
        }
        times: dict[str, list[float]] = {k: [] for k in kinds}
        for i in range(args.rounds):
            for kind, fn in list(kinds.items())[:: 1 if i % 2 else -1]:
                times[kind] += fn(args.batch)
        medians = {k: statistics.median(v) for k, v in times.items()}
        raw = medians["node raw POST"]
        print(f'execute("true") on one pod, {args.rounds} interleaved rounds x {args.batch} calls, median ms')
        print(f"{'client':<18} {'median ms':>10} {'vs node raw POST':>18}")
        for kind, value in medians.items():
            print(f"{kind:<18} {value:>10.2f} {value / raw:>17.2f}x")
        py.delete_session()
        py.close()
    finally:
        if node is not None:
            node.close()
        stop_operator(operator)
        cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        if started_cluster:
            cluster.down()


if __name__ == "__main__":
    main()
