"""A warm session's first command on the real node: create -> Ready -> the first `execute("true")`.

What a user waits for is the total, not Ready alone: a Ready session whose Pod its own NetworkPolicy
does not admit yet (agent-sandbox relabels an adopted Pod, the NetworkPolicy controller programs it)
refuses the client's first connection, which the client retries after a back-off. The template closes
every pod (`networkPolicy: {}`), as the sample does, so only the session's policy lets the client in.

With `--before DIR` (another checkout) that checkout's operator runs beside this one, each in its own
namespace with its own Lease, and the rounds alternate between them. Prints medians per side and the
share of first calls that met a refused connection. Real node only (kube-router enforces the policies).
Run: `.venv/bin/python -m benchmarks.bench_first_call --rounds 20 [--before /tmp/before]`.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import yaml

os.environ.setdefault("DEVCLUSTER_NODE", "real")

from benchmarks.common import checkout_pythonpath, create_namespace, start_operator, stop_operator, wait_pool_full
from devcluster import errors
from devcluster.cluster import Cluster, Paths, node_kind

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)

from kubernetes import client, config

from langchain_k8s_client import AgentSessionSandbox
from langchain_k8s_client import transport as pod_transport
from testkit import manifests
from testkit.operator_args import network_args

POOL = "closed"


@dataclass
class Side:
    name: str
    namespace: str
    pythonpath: str = ""
    rows: list[tuple[float, float, bool]] = field(default_factory=list)  # to Ready, first call, refused


class RefusalCounter:
    """Counts the connections the client's retry rule saw refused (it retries them: nothing was sent)."""

    def __init__(self) -> None:
        self.count = 0
        original = pod_transport._Attempts.after_error

        def after_error(attempts: pod_transport._Attempts, exc: httpx.TransportError) -> float:
            if isinstance(exc, httpx.ConnectError):
                self.count += 1
            return original(attempts, exc)

        setattr(pod_transport._Attempts, "after_error", after_error)  # noqa: B010 (mypy refuses the assignment)


def closed_template() -> dict[str, Any]:
    template = manifests.template("py", manifests.PYTHON_RUNTIME_IMAGE)
    template["spec"]["networkPolicyManagement"] = "Managed"
    template["spec"]["networkPolicy"] = {}
    return template


def one_round(api: client.CustomObjectsApi, side: Side, name: str, refusals: RefusalCounter) -> None:
    wait_pool_full(api, side.namespace, POOL, 1, timeout=180)
    time.sleep(1)  # the pool's replacement settles; both sides start from the same quiet
    started = time.monotonic()
    with AgentSessionSandbox(name, side.namespace, warm_pool=POOL, ttl="10m") as backend:
        backend._store.wait_ready(side.namespace, name, 60)
        ready = time.monotonic()
        refusals.count = 0
        result = backend.execute("true")
        done = time.monotonic()
        if result.exit_code != 0:
            raise RuntimeError(f"{name}: {result}")
    side.rows.append((ready - started, done - ready, refusals.count > 0))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--before", default="", help="another checkout: its operator alternates with this one's")
    args = parser.parse_args()
    if node_kind() != "real":  # `make` exports DEVCLUSTER_NODE=kwok: a kwok run would print kwok's numbers
        raise SystemExit(
            f"bench_first_call measures the real node (its NetworkPolicies); DEVCLUSTER_NODE={node_kind()}: "
            "run it with DEVCLUSTER_NODE=real"
        )
    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up()
    config.load_kube_config()
    api = client.CustomObjectsApi()
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "crds/")
    sides = [Side("this", "bench-first-this")]
    if args.before:
        sides.insert(0, Side("before", "bench-first-before", checkout_pythonpath(args.before)))
    refusals = RefusalCounter()
    operators = []
    try:
        for side in sides:
            create_namespace(cluster, side.namespace)
            docs = [closed_template(), manifests.warm_pool(POOL, "py", 1)]
            cluster.kubectl("apply", "-n", side.namespace, "-f", "-", input=yaml.safe_dump_all(docs))
            env = dict(os.environ)
            if side.pythonpath:
                env["PYTHONPATH"] = side.pythonpath + os.pathsep + env.get("PYTHONPATH", "")
            extra = ("--namespace", side.namespace, "--lease-name", f"agentsession-{side.name}", *network_args())
            operators.append(start_operator(*extra, env=env))
        for i in range(args.rounds):
            for side in sides[:: 1 if i % 2 == 0 else -1]:
                one_round(api, side, f"first-{i}", refusals)
    finally:
        for operator in operators:
            stop_operator(operator)
        for side in sides:
            cluster.kubectl("delete", "namespace", side.namespace, "--wait=false", check=False)
        if started_cluster:
            cluster.down()
    print(f"A warm session's first command on the {node_kind()} node (closed template), {args.rounds} rounds, medians")
    print(f"{'operator':<8} {'to Ready':>9} {'1st call':>9} {'total':>9} {'refused 1st connect':>20}")
    for side in sides:
        ready = 1000 * statistics.median(r[0] for r in side.rows)
        first = 1000 * statistics.median(r[1] for r in side.rows)
        total = 1000 * statistics.median(r[0] + r[1] for r in side.rows)
        refused = sum(r[2] for r in side.rows)
        print(f"{side.name:<8} {ready:>7.0f}ms {first:>7.0f}ms {total:>7.0f}ms {refused:>11} of {len(side.rows)}")


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
