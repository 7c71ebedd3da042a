"""Another namespace's create -> Ready while sixteen sessions hibernate at once (issue 49 item 4), real node.

Tenant A has sixteen sessions of a gVisor pool with `idleAction: Hibernate`, Ready and left alone; tenant B
creates a session of a warm runc pool (a warm pod: its Ready is the operator's and agent-sandbox's work, not a
pod start). Per round, the two conditions one after the other (quiet first: the hibernations end A's
sessions), each on the same background (A's sixteen sessions Ready, both warm pools full):
- quiet: B's create -> Ready (this process's clock, a watch on the session);
- hibernating: A's sixteen sessions' `idleTimeout` is cut to 1 s at once (their idle deadline long past: all
  sixteen passes hibernate now, the node agent checkpointing them one at a time), then B's create -> Ready.
  How many of A's sessions were still awake when B was Ready is kept (the overlap the figure is about).
Before each B, A's warm pool is full again (its refill's sixteen gVisor starts are not what B meets).
Ratio: hibernating / quiet (target <= 1.2). Results: benchmarks/results/bench_hibernate_fairness.json.
Run: `.venv/bin/python -m benchmarks.bench_hibernate_fairness [--rounds 3]` (root, real node, gVisor).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

os.environ.setdefault("DEVCLUSTER_NODE", "real")

from benchmarks.bench_gvisor import RUNTIMES, pool_manifests
from benchmarks.bench_hibernate import hibernating_operator
from benchmarks.common import (
    create_namespace,
    create_until_ready,
    load_average,
    stop_operator,
    wait_pool_full,
)
from benchmarks.results import Record
from devcluster import errors, nodeagent
from devcluster.cluster import Cluster, Paths

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)  # before the kubernetes client is imported

from kubernetes import client, config

from testkit import manifests

GROUP, VERSION, PLURAL = "agentsession.dev", "v1alpha1", "agentsessions"
NS_A, NS_B = "bench-hib-a", "bench-hib-b"
POOL_A, POOL_B = "gvisor", "runc"
SLEEPERS = 16
TIMEOUT = 600.0  # seconds any one wait of a round may take


def _sessions(api: client.CustomObjectsApi, namespace: str) -> list[dict[str, Any]]:
    return list(api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"])


def _wait(what: str, done: Any, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(0.5)


def b_to_ready(api: client.CustomObjectsApi, name: str) -> float:
    """Seconds from B's create to its phase Ready, seen by a watch on it."""
    seen = create_until_ready(api, NS_B, manifests.session(name, POOL_B, ttl="10m"), TIMEOUT)
    if seen is None:
        raise TimeoutError(f"B's session {name} not Ready within {TIMEOUT} s")
    return seen[1] - seen[0]


def delete_sessions(api: client.CustomObjectsApi, namespace: str) -> None:
    api.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    _wait(f"sessions of {namespace} deleted", lambda: not _sessions(api, namespace))


def asleep(session: dict[str, Any]) -> bool:
    return (session.get("status") or {}).get("phase") == "Suspended"


def one_round(api: client.CustomObjectsApi, round_: int) -> dict[str, dict[str, float]]:
    """A's sixteen sessions Ready (and both pools full again); B's create -> Ready with them at rest (quiet),
    then with all sixteen hibernating."""
    names = [f"a{round_}-{i}" for i in range(SLEEPERS)]
    wait_pool_full(api, NS_A, POOL_A, SLEEPERS, timeout=TIMEOUT)
    for name in names:
        body = manifests.session(name, POOL_A, ttl="30m", idleTimeout="30m", idleAction="Hibernate")
        api.create_namespaced_custom_object(GROUP, VERSION, NS_A, PLURAL, body)
    _wait(
        "A's sessions Ready",
        lambda: sum(s.get("status", {}).get("phase") == "Ready" for s in _sessions(api, NS_A)) >= SLEEPERS,
    )
    wait_pool_full(api, NS_A, POOL_A, SLEEPERS, timeout=TIMEOUT)  # the refill's gVisor starts are over
    wait_pool_full(api, NS_B, POOL_B, 1, timeout=TIMEOUT)
    quiet = b_to_ready(api, f"b-quiet-{round_}")
    delete_sessions(api, NS_B)
    wait_pool_full(api, NS_B, POOL_B, 1, timeout=TIMEOUT)

    def idle_now(name: str) -> None:
        body = {"spec": {"idleTimeout": "1s"}}
        api.patch_namespaced_custom_object(GROUP, VERSION, NS_A, PLURAL, name, body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(idle_now, names))
    hibernating = b_to_ready(api, f"b-hib-{round_}")
    awake = sum(not asleep(s) for s in _sessions(api, NS_A))
    _wait("A's sessions asleep", lambda: all(asleep(s) for s in _sessions(api, NS_A)))
    hibernated = sum(
        bool(((s.get("status") or {}).get("hibernation") or {}).get("hibernated")) for s in _sessions(api, NS_A)
    )
    delete_sessions(api, NS_B)
    delete_sessions(api, NS_A)
    return {
        "B create -> Ready": {"quiet": quiet, "16 hibernating": hibernating},
        "A still awake at B's Ready": {"16 hibernating": awake},
        "A hibernated": {"16 hibernating": hibernated},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up(node="real")
    if cluster.node != "real" or not nodeagent.has_gvisor():
        raise SystemExit("bench_hibernate_fairness needs the real node with gVisor: stop the kwok cluster first")
    record = Record.start("bench_hibernate_fairness", args.rounds, sleepers=SLEEPERS)
    operator = None
    loads = [load_average()]
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "crds/")
        for namespace, pool, runtime, replicas in ((NS_A, POOL_A, "gvisor", SLEEPERS), (NS_B, POOL_B, "runc", 1)):
            # A namespace an interrupted run left: gone first, so every round starts from empty pools.
            cluster.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--timeout=300s")
            create_namespace(cluster, namespace)
            docs = pool_manifests(pool, RUNTIMES[runtime], replicas)
            for doc in docs:
                doc["metadata"]["namespace"] = namespace
            cluster.apply(docs)
        operator = hibernating_operator(cluster, [NS_A, NS_B], "agentsession-bench-hibernate-fairness")
        config.load_kube_config()
        api = client.CustomObjectsApi()
        for i in range(args.rounds):
            rows = one_round(api, i)
            for row, values in rows.items():
                for condition, value in values.items():
                    record.sample(row, condition, value)
            print(f"round {i}: " + json.dumps(rows), flush=True)
            loads.append(load_average())
    finally:
        if operator is not None:
            stop_operator(operator)
        for namespace in (NS_A, NS_B):
            cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        if started_cluster:
            cluster.down()
    medians = record.medians()
    b = medians["B create -> Ready"]
    ratio = b["16 hibernating"] / b["quiet"]
    print(f"\nB's create -> Ready, {args.rounds} rounds interleaved (load {min(loads):.1f} to {max(loads):.1f})")
    for row, cols in medians.items():
        print(f"{row:<28}" + "".join(f" {c}: {v:7.2f}" for c, v in cols.items()))
    print(f"hibernating / quiet: {ratio:.2f} (target <= 1.2)")
    record.finish(unit="s; counts", medians=medians, ratios={"B create -> Ready, hibernating / quiet": ratio})


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
