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

from devcluster import build
from devcluster.cluster import Cluster
from tests.e2e import manifests


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ups", type=int, default=3, help="cluster start-ups to time")
    parser.add_argument("--claims", type=int, default=7, help="claims per cold/warm measurement")
    args = parser.parse_args()
    cluster = Cluster(out=io.StringIO())
    if cluster.is_running():
        raise SystemExit("a local cluster is already running: stop it first (make cluster-down)")
    build.build_all()
    ups = []
    for i in range(args.ups):
        started = time.monotonic()
        cluster.up()
        ups.append(time.monotonic() - started)
        if i < args.ups - 1:
            cluster.down()
    try:
        pause = measure_claims(cluster, manifests.PAUSE_IMAGE, "pause", args.claims)
        python = measure_claims(cluster, manifests.PYTHON_RUNTIME_IMAGE, "python", args.claims)
        rss = runtime_rss_mib(cluster)
    finally:
        cluster.down()
    rows = [
        (f"cluster-up, cached binaries (median of {args.ups})", f"{statistics.median(ups):.1f} s", "< 30 s"),
        ("pause claim -> Ready, cold", f"{pause['cold']:.2f} s", ""),
        ("pause claim -> Ready, warm", f"{pause['warm']:.2f} s", ""),
        ("python-runtime claim -> Ready, cold", f"{python['cold']:.2f} s", "< 3 s"),
        ("python-runtime claim -> Ready, warm", f"{python['warm']:.2f} s", "< 1 s"),
        ("python runtime pod RSS (bwrap + uvicorn)", f"{rss:.1f} MiB", ""),
        ("warm/cold ratio, python runtime", f"{python['warm'] / python['cold']:.2f}", ""),
    ]
    for component in build.COMPONENTS:
        seconds = build.build_time(component)
        rows.append(
            (
                f"first build: {component.name} {component.version}",
                f"{seconds:.0f} s" if seconds is not None else "n/a",
                "",
            )
        )
    width = max(len(r[0]) for r in rows)
    print(f"{'measure'.ljust(width)}  {'median':>10}  target")
    for name, value, target in rows:
        print(f"{name.ljust(width)}  {value:>10}  {target}")


if __name__ == "__main__":
    main()
