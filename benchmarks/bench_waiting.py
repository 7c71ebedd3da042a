"""Issue 28 item 2: what sessions that only wait cost a replica's memory. Sessions naming a warm pool that
does not exist wait (a phase, no claim, no pod: a pod ResourceQuota does not stop them); at each point a
fresh operator replica takes over N of them and is measured once it settles after its first pass
(benchmarks.bench_restart's `settle`): its RSS then, its peak on the way, and how long it took.

The points share their sessions: namespace i holds points[i] - points[i-1] of them, and the replica of
point i watches namespaces 0..i (`--namespace`, repeated), so every point is measured on sessions created
once, in any order. With `--before DIR` (another checkout, e.g. `git archive` of the previous commit) each
point's restarts alternate between that checkout's operator and this one's, on the same sessions, the
order reversed every round, so the two are measured side by side. Bytes per waiting session: the slope of
the settled RSS between consecutive points (from a replica watching one empty namespace to the first).
Run: `.venv/bin/python -m benchmarks.bench_waiting --points 5000,20000,60000 --rounds 2 [--before DIR]`.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client, config

from benchmarks.bench_restart import MISSING_POOL, count_ready, settle
from benchmarks.common import checkout_pythonpath, load_average, start_operator, stop_on_sigterm, stop_operator
from benchmarks.populate import GROUP, PLURAL, VERSION, create_sessions, list_sessions, phase, wait_populated
from benchmarks.results import Record
from devcluster import errors
from devcluster.cluster import Cluster, Paths
from testkit import manifests

NS_PREFIX = "bench-waiting-"
EMPTY = NS_PREFIX + "empty"  # point 0: a replica watching one namespace with no session
MIB = 1024 * 1024
THREADS = 16
TIMEOUT = 3600.0  # seconds the sessions of a namespace may take to have a phase each


def namespaces_of(points: list[int]) -> list[tuple[str, int]]:
    """The namespaces and how many sessions each holds: point i's replica watches the first i + 1."""
    return [(f"{NS_PREFIX}{i}", n - (points[i - 1] if i else 0)) for i, n in enumerate(points)]


def populate(
    cluster: Cluster, api: client.CustomObjectsApi, spaces: list[tuple[str, int]], copy_status: bool = False
) -> None:
    """Create the waiting sessions missing from each namespace through one operator watching them all, and
    wait until each has a phase (a session's first pass done: what a replica then takes over). `copy_status`:
    wait for one per namespace only, then copy its status to the others (copy_statuses): on a loaded
    machine the operator writes a few per second, and the restarts measure the sessions, not how they
    got their status."""
    for ns, _ in spaces:
        cluster.kubectl("create", "namespace", ns, check=False)
    log = open(cluster.paths.logs / "operator-waiting-populate.log", "wb")  # noqa: SIM115
    operator = start_operator("--log-level", "WARNING", *_watching([ns for ns, _ in spaces]), stdout=log)
    try:
        for ns, n in spaces:
            there = {s["metadata"]["name"] for s in list_sessions(api, ns)}
            keys = [(ns, name) for name in (f"w{i:05d}" for i in range(n)) if name not in there]
            create_sessions(api, keys, lambda name: manifests.session(name, MISSING_POOL, idleTimeout="8h"))
        if not copy_status:
            for ns, n in spaces:
                wait_populated(phased(api, ns), n, TIMEOUT, f"phased in {ns}", poll=15)
            return
        for ns, _ in spaces:  # one status the operator wrote in each namespace
            wait_populated(phased(api, ns), 1, TIMEOUT, f"phased in {ns}", poll=2)
    finally:
        stop_operator(operator)
    for ns, _ in spaces:
        copy_statuses(api, ns)


def phased(api: client.CustomObjectsApi, namespace: str) -> Callable[[], int]:
    """How many sessions of `namespace` have a phase (read when called)."""
    return lambda: count_ready(api, namespace, waiting=True)[1]


def copy_statuses(api: client.CustomObjectsApi, namespace: str) -> None:
    """Give every session of `namespace` without a phase the status the operator wrote for one of them
    (the same verdict: the same missing pool, spec and generation), written by THREADS threads."""
    sessions = list_sessions(api, namespace)
    status = next(s["status"] for s in sessions if phase(s))
    bare = [s["metadata"]["name"] for s in sessions if not phase(s)]

    def write(name: str) -> None:
        api.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, {"status": status})

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(write, bare))
    print(f"{time.strftime('%H:%M:%S')} {len(bare)} statuses copied in {namespace}", flush=True)


def _watching(namespaces: list[str]) -> list[str]:
    return [arg for ns in namespaces for arg in ("--namespace", ns)]


def restart(cluster: Cluster, label: str, pythonpath: str | None, namespaces: list[str]) -> dict[str, Any]:
    """A fresh replica (of `pythonpath`'s checkout, or this one) on `namespaces`, measured until it
    settles, then stopped."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    path = cluster.paths.logs / f"operator-waiting-{label}.log"
    with open(path, "ab") as log:
        offset = log.tell()
        started = time.monotonic()
        operator = start_operator("--log-level", "INFO", *_watching(namespaces), stdout=log, env=env)
        try:
            # This tree's operator says when its take-over is done; another checkout's (--before) may not.
            return {"label": label, **settle(operator, started, path, offset, first_pass=not pythonpath)}
        finally:
            stop_operator(operator)


def measure_point(
    cluster: Cluster, sides: list[tuple[str, str | None]], rounds: int, n: int, namespaces: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """`rounds` restarts of each side on `namespaces` (n sessions), the order reversed each round."""
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in sides}
    for round_ in range(rounds):
        for label, path in sides if round_ % 2 == 0 else sides[::-1]:
            r = restart(cluster, label, path, namespaces)
            results[label].append(r)
            print(
                f"{time.strftime('%H:%M:%S')} {n} waiting, {label}: first pass {r.get('first_pass_s')} s,"
                f" settled in {r['settled_s']:.1f} s,"
                f" RSS {r['settled_mib']:.0f} MiB (peak {r['peak_mib']:.0f}), load {load_average():.1f}",
                flush=True,
            )
    return results


def medians(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rows) for k in ("settled_mib", "peak_mib", "settled_s")}


def main() -> None:
    stop_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", default="5000,20000,60000", help="waiting sessions at each point")
    parser.add_argument("--rounds", type=int, default=2, help="restarts of each operator per point")
    parser.add_argument("--before", default="", help="another checkout: its operator alternates with this one's")
    parser.add_argument("--copy-status", action="store_true", help="copy one operator-written status to the rest")
    parser.add_argument("--only", default="", help="measure only these points (0 included: the empty namespace)")
    parser.add_argument("--populate-only", action="store_true", help="create the sessions, measure nothing")
    args = parser.parse_args()
    points = [0, *sorted(int(p) for p in args.points.split(","))]
    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up()
    config.load_kube_config(config_file=str(Paths().kubeconfig))
    cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = 32
    api = client.CustomObjectsApi(client.ApiClient(cfg))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "crds/")
    cluster.kubectl("create", "namespace", EMPTY, check=False)
    sides: list[tuple[str, str | None]] = [("this", None)]
    if args.before:
        sides.insert(0, ("before", checkout_pythonpath(args.before)))
    table: dict[int, dict[str, dict[str, float]]] = {}
    samples: dict[int, dict[str, list[dict[str, Any]]]] = {}
    spaces = namespaces_of(points[1:])
    try:
        started = time.monotonic()
        populate(cluster, api, spaces, args.copy_status)
        print(f"{time.strftime('%H:%M:%S')} {points[-1]} waiting sessions in {time.monotonic() - started:.0f} s")
        only = {int(p) for p in args.only.split(",")} if args.only else set(points)
        for i, n in enumerate([] if args.populate_only else points):
            if n not in only:
                continue
            watched = [EMPTY] if n == 0 else [ns for ns, _ in spaces[:i]]
            results = measure_point(cluster, sides, args.rounds, n, watched)
            table[n] = {label: medians(rows) for label, rows in results.items()}
            samples[n] = results
    except KeyboardInterrupt:
        print("interrupted: the points measured so far")
    finally:
        if started_cluster:
            cluster.down()
    print(f"\nA fresh replica taking over N waiting sessions (missing pool), medians of {args.rounds} restarts each")
    print(
        f"{'N':>6} {'operator':>8} {'RSS MiB':>8} {'peak MiB':>8} {'first pass s':>12} {'B/session':>10} {'ratio':>6}"
    )
    record = Record.start("bench_waiting", rounds=args.rounds, points=args.points, copy_status=args.copy_status)
    for n in sorted(samples):
        for label, rows in samples[n].items():
            for r in rows:  # a row per point and side: "20000" (this), "20000 before"
                row = str(n) if label == "this" else f"{n} {label}"
                for key in ("settled_mib", "peak_mib", "first_pass_s", "settled_s"):
                    if r.get(key) is not None:
                        record.sample(row, key, float(r[key]))
    if samples:
        record.finish("MiB, s")
    done = sorted(table)
    for i, n in enumerate(done):
        for label, _ in sides:
            m = table[n][label]
            slope = ""
            if i > 0:
                prev = table[done[i - 1]][label]
                slope = f"{(m['settled_mib'] - prev['settled_mib']) * MIB / (n - done[i - 1]):.0f}"
            ratio = ""
            if label == "this" and "before" in table[n]:
                ratio = f"{m['settled_mib'] / table[n]['before']['settled_mib']:.2f}"
            print(
                f"{n:>6} {label:>8} {m['settled_mib']:>8.0f} {m['peak_mib']:>8.0f} {m['settled_s']:>12.1f}"
                f" {slope:>10} {ratio:>6}"
            )
    print("B/session: the settled RSS's slope from the previous N; ratio: this / before (settled RSS)")
    print(f"load {load_average():.1f}")


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
