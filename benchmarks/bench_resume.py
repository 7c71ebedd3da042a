"""Resume of an idle-suspended session on the real node (issue 32), under runc and gVisor (issue 29).

Per round and runtime, interleaved (the order reversed every other round):
- warm: AgentSession create -> Ready, adopted from a full pool;
- cold: create -> Ready with a new sandbox (env forces it);
- resume: a session with `idleTimeout: 5s, idleAction: Suspend` left to suspend (its Pod gone), then the
  client's next `execute("true")` timed from the call to its answer: the client finds the session
  Suspended, reports activity (which wakes it), watches it to Ready and runs the command.

A watch on the namespace's Sandboxes, Pods and AgentSessions stamps each resume's steps as they happen:
activity sent -> Sandbox Running (the operator's reaction) -> Pod created (agent-sandbox) -> Pod Ready
(the kubelet and the runtime: "pod start") -> session Ready (agent-sandbox's status, then the operator's)
-> answered (the client's watch and the command). Issue 32's target: resume <= warm + pod start.
Prints medians and p90s. Run: `.venv/bin/python -m benchmarks.bench_resume [--rounds 5]` (root, real node).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

os.environ.setdefault("DEVCLUSTER_NODE", "real")

from benchmarks.bench_gvisor import RUNTIMES, claim_to_ready, pool_manifests
from benchmarks.common import create_namespace, load_average, start_operator, stop_operator, wait_pool_full
from devcluster import errors
from devcluster.cluster import Cluster, Paths
from devcluster.realnode import network

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)  # before the kubernetes client is imported

from kubernetes import client, config, watch

from langchain_k8s_client import AgentSessionSandbox

NS = "bench-resume"
# Each pool: (runtime class, the runtime container's readinessProbe periodSeconds). 5 s is the shipped
# examples'; a Pod is Ready only at the first probe that finds the runtime listening.
VARIANTS: dict[str, tuple[str | None, int]] = {
    "runc": (RUNTIMES["runc"], 5),
    "gvisor": (RUNTIMES["gvisor"], 5),
    "runc-p1": (RUNTIMES["runc"], 1),
    "gvisor-p1": (RUNTIMES["gvisor"], 1),
}
STEPS = ("sandbox Running", "pod created", "pod Ready", "session Ready")


class Stamps:
    """Monotonic time of the first event showing each step, per object name, from three watches."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], float] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.watches: list[watch.Watch] = []

    def mark(self, name: str, step: str) -> None:
        with self.lock:
            self.seen.setdefault((name, step), time.perf_counter())

    def forget(self, name: str) -> None:
        with self.lock:
            for key in [k for k in self.seen if k[0] == name]:
                del self.seen[key]

    def at(self, name: str, step: str) -> float:
        with self.lock:
            return self.seen.get((name, step), float("nan"))

    def start(self) -> None:
        core, custom = client.CoreV1Api(), client.CustomObjectsApi()
        sources: list[tuple[Callable[..., Any], tuple[Any, ...], Callable[[dict[str, Any]], Iterator[str]]]] = [
            (core.list_namespaced_pod, (NS,), _pod_steps),
            (custom.list_namespaced_custom_object, ("agents.x-k8s.io", "v1beta1", NS, "sandboxes"), _sandbox_steps),
            (
                custom.list_namespaced_custom_object,
                ("agentsession.dev", "v1alpha1", NS, "agentsessions"),
                _session_steps,
            ),
        ]
        for fn, args, steps in sources:
            threading.Thread(target=self._run, args=(fn, args, steps), daemon=True).start()

    def _run(
        self, fn: Callable[..., Any], args: tuple[Any, ...], steps: Callable[[dict[str, Any]], Iterator[str]]
    ) -> None:
        while not self.stopping.is_set():
            w = watch.Watch()
            self.watches.append(w)
            try:
                for event in w.stream(fn, *args, timeout_seconds=60, _request_timeout=90):
                    obj = event["object"]
                    if not isinstance(obj, dict):
                        obj = client.ApiClient().sanitize_for_serialization(obj)
                    if event["type"] == "DELETED":
                        continue
                    for step in steps(obj):
                        self.mark(obj["metadata"]["name"], step)
            except Exception:  # a dropped watch starts again; the next event is what counts
                time.sleep(0.1)

    def stop(self) -> None:
        self.stopping.set()
        for w in self.watches:
            w.stop()


def _pod_steps(pod: dict[str, Any]) -> Iterator[str]:
    yield "pod created"
    conditions = (pod.get("status") or {}).get("conditions") or []
    if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        yield "pod Ready"


def _sandbox_steps(sandbox: dict[str, Any]) -> Iterator[str]:
    if (sandbox.get("spec") or {}).get("operatingMode", "Running") == "Running":
        yield "sandbox Running"


def _session_steps(session: dict[str, Any]) -> Iterator[str]:
    if (session.get("status") or {}).get("phase") == "Ready":
        yield "session Ready"


def _wait(what: str, check: Callable[[], bool], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.2)


def _resume_once(cluster: Cluster, stamps: Stamps, name: str, pool: str) -> dict[str, float]:
    """A session left to idle-suspend, then one call: seconds from the call to each step and the answer."""
    backend = AgentSessionSandbox(name, NS, warm_pool=pool, ttl="20m", idle_timeout="5s", idle_action="Suspend")
    view = backend.wait_ready()  # no call before: a call would report its timeout's worth of busy time
    sandbox, pod = view.sandbox_name or "", view.pod_name or ""
    _wait(f"{name} suspended", lambda: backend.session.phase == "Suspended")
    _wait(f"{name}'s pod gone", lambda: cluster.get_json("pod", pod, NS) is None)
    for key in (sandbox, pod, name):
        stamps.forget(key)
    started = time.perf_counter()
    result = backend.execute("true")
    answered = time.perf_counter()
    assert result.exit_code == 0, result
    backend.delete_session()
    owner = {"sandbox Running": sandbox, "pod created": pod, "pod Ready": pod, "session Ready": name}
    times = {step: stamps.at(owner[step], step) - started for step in STEPS}
    times["answered"] = answered - started
    return times


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--periods", action="store_true", help="also pools whose readiness probe runs every 1 s")
    args = parser.parse_args()
    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up(node="real")
    if cluster.node != "real":
        raise SystemExit("bench_resume needs the real node: stop the kwok cluster first (make cluster-down)")
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "crds/")
    create_namespace(cluster, NS)
    variants = {k: v for k, v in VARIANTS.items() if args.periods or v[1] == 5}
    for name, (runtime_class, period) in variants.items():
        docs = pool_manifests(name, runtime_class, 1)
        docs[0]["spec"]["podTemplate"]["spec"]["containers"][0]["readinessProbe"]["periodSeconds"] = period
        for doc in docs:
            doc["metadata"]["namespace"] = NS
        cluster.apply(docs)
    operator = start_operator(
        f"--cluster-cidr={network.POD_CIDR}",
        f"--cluster-cidr={network.SERVICE_CIDR}",
        f"--client-cidr={network.HOST_IP}/32",
        "--namespace",
        NS,
        "--lease-name",
        "agentsession-bench-resume",
    )
    config.load_kube_config()
    custom = client.CustomObjectsApi()
    stamps = Stamps()
    stamps.start()
    warm: dict[str, list[float]] = {name: [] for name in variants}
    cold: dict[str, list[float]] = {name: [] for name in variants}
    resume: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    loads = [load_average()]
    try:
        for i in range(args.rounds):
            for name in list(variants)[:: 1 if i % 2 else -1]:
                wait_pool_full(custom, NS, name, 1, timeout=180)
                warm[name].append(claim_to_ready(f"w{i}-{name}", name, namespace=NS))
                cold[name].append(claim_to_ready(f"c{i}-{name}", name, env={"COLD": "1"}, namespace=NS))
                wait_pool_full(custom, NS, name, 1, timeout=180)
                resume[name].append(_resume_once(cluster, stamps, f"r{i}-{name}", name))
                print(
                    f"round {i} {name}: " + ", ".join(f"{k} {v:.2f}s" for k, v in resume[name][-1].items()), flush=True
                )
            loads.append(load_average())
    finally:
        stamps.stop()
        stop_operator(operator)
        cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        if started_cluster:
            cluster.down()
    load = f"load {min(loads):.1f} to {max(loads):.1f}"
    print(f"\nResume on the real node, {args.rounds} rounds interleaved, seconds ({load})")
    print(f"{'pool (runtime, probe period)':<44}" + "".join(f" {f'{k} ({v[1]} s)':>16}" for k, v in variants.items()))

    def line(label: str, values: dict[str, list[float]]) -> None:
        cells = [f"{statistics.median(v):6.2f} / {_p90(v):5.2f}" for v in values.values()]
        print(f"{label:<44}" + "".join(f" {c:>16}" for c in cells))

    print(f"{'(median / p90)':<44}")
    line("claim -> Ready, warm", warm)
    line("claim -> Ready, cold", cold)
    for step in (*STEPS, "answered"):
        line(f"resume: call -> {step}", {k: [r[step] for r in v] for k, v in resume.items()})
    pod_start = {k: [r["pod Ready"] - r["pod created"] for r in v] for k, v in resume.items()}
    line("pod start (pod created -> pod Ready)", pod_start)
    ours = {k: [r["session Ready"] - r["pod Ready"] for r in v] for k, v in resume.items()}
    line("pod Ready -> session Ready", ours)
    print(f"\n{'resume / (warm + pod start), target <= 1.0':<44}", end="")
    for name in variants:
        target = statistics.median(warm[name]) + statistics.median(pod_start[name])
        print(f" {statistics.median(r['answered'] for r in resume[name]) / target:>16.2f}", end="")
    print(f"\n{'resume / cold claim':<44}", end="")
    for name in variants:
        ratio = statistics.median(r["answered"] for r in resume[name]) / statistics.median(cold[name])
        print(f" {ratio:>16.2f}", end="")
    print()


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
