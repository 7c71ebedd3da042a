"""Benchmark the local control plane: start-up, claim-to-Ready (cold and warm), runtime memory.

Prints one table of medians. Run: `.venv/bin/python -m benchmarks.bench_cluster [--ups 3] [--claims 7]`.
It starts and stops its own cluster (refuses to run while one is already up, to measure a cold start).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from devcluster import build, errors
from devcluster.cluster import Cluster
from testkit import manifests


def kubectl(cluster: Cluster, *args: str, input: str | None = None) -> str:
    return cluster.kubectl(*args, input=input).stdout


def apply(cluster: Cluster, namespace: str, *docs: dict[str, Any]) -> None:
    kubectl(cluster, "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(list(docs)))


def claim_to_ready(cluster: Cluster, namespace: str, pool: str, name: str, timeout: float = 120) -> float:
    """Seconds from the claim's creation request to Ready=True, seen through a watch."""
    started = time.monotonic()
    apply(cluster, namespace, manifests.claim(name, pool))
    watch = subprocess.Popen(
        [
            str(build.KUBERNETES.path("kubectl")),
            f"--kubeconfig={cluster.paths.kubeconfig}",
            "get",
            "sandboxclaim",
            name,
            "-n",
            namespace,
            "-w",
            "-o",
            "json",
            "--output-watch-events",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        decoder = json.JSONDecoder()
        buffer = ""
        assert watch.stdout is not None
        while time.monotonic() - started < timeout:
            chunk = watch.stdout.readline()
            if not chunk:
                break
            buffer += chunk
            try:
                event, _ = decoder.raw_decode(buffer.strip())
            except ValueError:
                continue
            buffer = ""
            conds = (event["object"].get("status") or {}).get("conditions") or []
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conds):
                return time.monotonic() - started
    finally:
        watch.kill()
        watch.wait()
    raise TimeoutError(f"claim {name} not Ready within {timeout} s")


def wait_pool(cluster: Cluster, namespace: str, pool: str, replicas: int, timeout: float = 180) -> None:
    """Wait until the pool holds `replicas` Ready sandboxes it still owns (not yet adopted by a claim)."""

    def owned_by_pool(sandbox: dict[str, Any]) -> bool:
        refs = sandbox["metadata"].get("ownerReferences") or []
        return any(r["kind"] == "SandboxWarmPool" and r["name"] == pool for r in refs)

    def ready(sandbox: dict[str, Any]) -> bool:
        conds = (sandbox.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = json.loads(kubectl(cluster, "get", "sandbox", "-n", namespace, "-o", "json"))["items"]
        if sum(owned_by_pool(s) and ready(s) for s in items) >= replicas:
            return
        time.sleep(0.2)
    raise TimeoutError(f"pool {pool} did not fill")


def measure_claims(cluster: Cluster, image: str, label: str, count: int) -> dict[str, float]:
    ns = f"bench-{label}"
    kubectl(cluster, "create", "namespace", ns)
    apply(
        cluster,
        ns,
        manifests.template(label, image),
        manifests.warm_pool(f"{label}-cold", label, 0),
        manifests.warm_pool(f"{label}-warm", label, count),
    )
    cold = [claim_to_ready(cluster, ns, f"{label}-cold", f"cold-{i}") for i in range(count)]
    wait_pool(cluster, ns, f"{label}-warm", count)
    warm = []
    for i in range(count):
        warm.append(claim_to_ready(cluster, ns, f"{label}-warm", f"warm-{i}"))
        wait_pool(cluster, ns, f"{label}-warm", count)  # let the pool refill: each claim measures a warm hit
    return {"cold": statistics.median(cold), "warm": statistics.median(warm)}


def runtime_rss_mib(cluster: Cluster) -> float:
    """RSS of one python runtime pod: bwrap and every process below it (uvicorn runs in its own session)."""
    root = int(next(cluster.paths.pods.glob("bench-python_*/pid")).read_text())
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().split(")")[-1].split()[1])
            rss[int(entry.name)] = next(
                int(line.split()[1])
                for line in (entry / "status").read_text().splitlines()
                if line.startswith("VmRSS:")
            )
        except (OSError, ValueError, StopIteration):
            continue

    def below_root(pid: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parents.get(pid, 0)
        return False

    return sum(kib for pid, kib in rss.items() if below_root(pid)) / 1024


def measure_node(node: str, ups_count: int, claims: int) -> dict[str, float | None]:
    """Start-up (cached binaries and images) and claim-to-Ready on one kind of node."""
    cluster = Cluster(out=io.StringIO())
    ups = []
    for i in range(ups_count):
        started = time.monotonic()
        cluster.up(node=node)
        ups.append(time.monotonic() - started)
        if i < ups_count - 1:
            cluster.down()
    try:
        pause = measure_claims(cluster, manifests.PAUSE_IMAGE, "pause", claims)
        python = measure_claims(cluster, manifests.PYTHON_RUNTIME_IMAGE, "python", claims)
        rss = runtime_rss_mib(cluster) if node == "kwok" else None
    finally:
        cluster.down()
    return {
        "up": statistics.median(ups),
        "pause-cold": pause["cold"],
        "pause-warm": pause["warm"],
        "python-cold": python["cold"],
        "python-warm": python["warm"],
        "rss": rss,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ups", type=int, default=3, help="cluster start-ups to time")
    parser.add_argument("--claims", type=int, default=7, help="claims per cold/warm measurement")
    parser.add_argument("--node", choices=["kwok", "real", "both"], default="both")
    args = parser.parse_args()
    if Cluster().is_running():
        raise SystemExit("a local cluster is already running: stop it first (make cluster-down)")
    nodes = ["kwok", "real"] if args.node == "both" else [args.node]
    for node in nodes:
        build.build_all(node=node)
    results = {node: measure_node(node, args.ups, args.claims) for node in nodes}

    def cell(value: float | None, unit: str) -> str:
        return "n/a" if value is None else f"{value:.2f} {unit}"

    rows = [
        (f"cluster-up, cached (median of {args.ups})", "up", "s", "< 30 s"),
        ("pause claim -> Ready, cold", "pause-cold", "s", ""),
        ("pause claim -> Ready, warm", "pause-warm", "s", ""),
        ("python-runtime claim -> Ready, cold", "python-cold", "s", "< 3 s"),
        ("python-runtime claim -> Ready, warm", "python-warm", "s", "< 1 s"),
        ("python runtime pod RSS (bwrap + uvicorn)", "rss", "MiB", ""),
    ]
    width = max(len(r[0]) for r in rows) + 2
    print(f"claims per measure: {args.claims}; medians")
    print("measure".ljust(width) + "".join(f"{node:>14}" for node in nodes) + "  target")
    for name, key, unit, target in rows:
        print(name.ljust(width) + "".join(f"{cell(results[n][key], unit):>14}" for n in nodes) + f"  {target}")
    if len(nodes) == 2:
        for key in ("python-cold", "python-warm"):
            print(f"real/kwok ratio, {key}: {results['real'][key] / results['kwok'][key]:.2f}")  # type: ignore[operator]
    print()
    for component in build.components("real"):
        seconds = build.build_time(component)
        print(f"first build: {component.name} {component.version}: " + (f"{seconds:.0f} s" if seconds else "n/a"))


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
