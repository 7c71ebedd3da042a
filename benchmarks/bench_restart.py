"""A fresh operator replica (a restart, a failover) taking over N live sessions: how long it stays busy,
how much memory it peaks at, and what it asks of the API server.

The sessions (pause-image pool on the kwok node) are created through the operator once and kept; then
the operator is stopped and a fresh one started, `--rounds` times. With `--before DIR` (another checkout,
e.g. a `git worktree` of the previous commit) the rounds alternate between that checkout's operator and
this one's, in one run on the same sessions, so the two are measured side by side.

Per restart: seconds until the operator settles (the first moment after which it used under 5 % of a
core for 3 s), its CPU seconds until then, its peak RSS (VmHWM), and the API server's requests by verb
while it settled (apiserver_request_total; nothing else acts on the cluster meanwhile).
With `--waiting` the sessions name a warm pool that does not exist (issue 28 item 2: they use no pod, so
a pod quota does not stop them): the operator's cost of sessions that only wait, without claims,
Sandboxes or NetworkPolicies; they count as populated once each has a phase. Each restart also reports
the RSS once settled, and the peak over it.
Run: `.venv/bin/python -m benchmarks.bench_restart --sessions 3000 --rounds 4 [--before /path/to/checkout]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import (
    apiserver_requests,
    bench_cluster,
    checkout_pythonpath,
    load_average,
    proc_cpu_seconds,
    proc_peak_rss_mib,
    proc_rss_mib,
    start_operator,
    stop_on_sigterm,
    stop_operator,
)
from benchmarks.populate import create_sessions, list_sessions, phase, wait_populated
from benchmarks.results import Record
from devcluster import errors
from devcluster.cluster import Cluster, Paths

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)

from kubernetes import client

from testkit import manifests

NS = "bench-restart"
NS_WAITING = "bench-restart-waiting"
MISSING_POOL = "no-such-pool"
GROUP, VERSION = "agentsession.dev", "v1alpha1"
THREADS = 16
BATCH = 250
SETTLED_CPU = 0.05  # share of a core under which the operator counts as idle
SETTLED_FOR = 3.0  # seconds it must stay under it
TIMEOUT = 900.0  # seconds a restart may take before the run gives up on it
# Warm pools and templates too: a waiting session's missing pool was read once per pass (issue 53 item 3).
RESOURCES = (
    "agentsessions",
    "sandboxclaims",
    "sandboxes",
    "networkpolicies",
    "events",
    "sandboxwarmpools",
    "sandboxtemplates",
)


def api_requests(cluster: Cluster) -> dict[str, float]:
    """The API server's requests so far, by "VERB resource", for the resources the operator touches."""
    counts: dict[str, float] = defaultdict(float)
    for (verb, resource, _), value in apiserver_requests(cluster).items():
        if resource in RESOURCES:
            counts[f"{verb} {resource}"] += value
    return counts


def count_ready(api: client.CustomObjectsApi, namespace: str = NS, waiting: bool = False) -> tuple[int, int]:
    """Sessions, and those populated: Ready (or, `waiting`, with any phase)."""
    sessions = list_sessions(api, namespace)
    ready = sum(bool(phase(s)) if waiting else phase(s) == "Ready" for s in sessions)
    return len(sessions), ready


def populate(
    cluster: Cluster,
    api: client.CustomObjectsApi,
    n: int,
    waiting: bool = False,
    wait: bool = True,
    namespace: str | None = None,
) -> None:
    """Create sessions through a running operator until `n` exist, and wait until all are Ready (`waiting`:
    on a missing warm pool, until each has a phase; `wait` False: not at all). `namespace`: another than
    this benchmark's own."""
    ns = namespace or (NS_WAITING if waiting else NS)
    total, ready = count_ready(api, ns, waiting)
    if total >= n and (ready >= n or not wait):
        print(f"{total} sessions already there ({ready} populated) in {ns}")
        return
    cluster.kubectl("create", "namespace", ns, check=False)
    docs = [manifests.template("pause"), manifests.warm_pool("pool", "pause", 0)]
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
    log = open(cluster.paths.logs / "operator-restart-populate.log", "wb")  # noqa: SIM115
    operator = start_operator("--log-level", "WARNING", "--namespace", ns, stdout=log)
    pool_name = MISSING_POOL if waiting else "pool"
    try:
        keys = [(ns, f"s{i:05d}") for i in range(total, n)]
        create_sessions(
            api, keys, lambda name: manifests.session(name, pool_name, idleTimeout="8h"), threads=THREADS, batch=BATCH
        )
        if wait:
            wait_populated(lambda: count_ready(api, ns, waiting)[1], n, TIMEOUT, "populated")
    finally:
        stop_operator(operator)


STARTED_LINE = b"agentsession operator started"  # logged once its startup (prime included) is done
FIRST_PASS_LINE = b'"first pass done"'  # kube/takeover.py: the take-over's pass over every session ended


def first_pass_done(log: Path, offset: int) -> dict[str, Any] | None:
    """The operator's own end-of-take-over line (its phases' times), once it is in the log after `offset`."""
    with open(log, "rb") as f:
        f.seek(offset)
        for line in f:
            if FIRST_PASS_LINE in line:
                try:
                    return dict(json.loads(line))
                except ValueError:
                    return {"event": "first pass done"}
    return None


def settle(
    operator: subprocess.Popen[bytes],
    started: float,
    log: Path | None = None,
    offset: int = 0,
    first_pass: bool = False,
) -> dict[str, Any]:
    """Sample a just-started operator until it settles: seconds (from `started`) to the first moment after
    which it used under SETTLED_CPU of a core for SETTLED_FOR s, its CPU seconds until then, its peak RSS
    and its RSS once settled. With `log`, not before it logged its start there (after `offset`): an
    operator whose start-up listing waits on a busy API server is idle, not settled. `first_pass` (an
    operator that says when its take-over is done): not before its "first pass done" line either, whose
    seconds since the process start (`first_pass_s`) and phases are returned beside."""
    samples: list[tuple[float, float]] = []  # (seconds since start, CPU seconds)
    up = log is None
    done: dict[str, Any] | None = None
    while time.monotonic() - started < TIMEOUT:
        time.sleep(0.5)
        now = time.monotonic() - started
        samples.append((now, proc_cpu_seconds(operator.pid)))
        if not up:
            with open(log, "rb") as f:  # type: ignore[arg-type]
                f.seek(offset)
                up = STARTED_LINE in f.read()
            continue
        if first_pass and done is None and log is not None:
            done = first_pass_done(log, offset)
            if done is None:
                continue
        window = [s for s in samples if s[0] >= now - SETTLED_FOR]
        if now > 5 and window[0][0] <= now - SETTLED_FOR + 0.6:
            used = (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0])
            if used < SETTLED_CPU:
                measured: dict[str, Any] = {
                    "settled_s": window[0][0],
                    "cpu_s": window[0][1],
                    "peak_mib": proc_peak_rss_mib(operator.pid),
                    "settled_mib": proc_rss_mib(operator.pid),
                }
                if done is not None:
                    measured["first_pass_s"] = done.get("since_process_start_seconds")
                    measured["phases"] = {k: v for k, v in done.items() if k.endswith("_seconds")}
                return measured
    raise RuntimeError(f"the operator was still busy after {TIMEOUT:.0f} s")


def request_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def fresh_replica(
    cluster: Cluster,
    namespace: str,
    log_name: str,
    env: dict[str, str] | None = None,
    on_start: Callable[[int], None] = lambda pid: None,
    wait_started: bool = False,
    first_pass: bool = False,
) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    """Start a fresh operator on `namespace` as it is and measure it until it settles: `settle`'s
    numbers and the API server's requests meanwhile (by "VERB resource", and GETs, LISTs, writes).
    `on_start` is given its process id as soon as it runs. `wait_started`: logs at INFO, and settling counts
    only from its "started" line (an operator waiting on a busy API server is idle, not done)."""
    before = api_requests(cluster)
    path = cluster.paths.logs / log_name
    log = open(path, "ab")  # noqa: SIM115 - the operator's lifetime
    offset = log.tell()
    started = time.monotonic()
    level = "INFO" if wait_started else "WARNING"
    operator = start_operator("--log-level", level, "--namespace", namespace, stdout=log, env=env)
    on_start(operator.pid)
    try:
        measured: dict[str, Any] = dict(
            settle(operator, started, path if wait_started else None, offset, first_pass=first_pass)
        )
    except BaseException:
        stop_operator(operator)
        raise
    requests = request_delta(before, api_requests(cluster))

    def verbs(*names: str) -> float:
        return sum(v for k, v in requests.items() if k.split()[0] in names)

    measured.update(
        requests=requests, gets=verbs("GET"), lists=verbs("LIST"), writes=verbs("POST", "PUT", "PATCH", "DELETE")
    )
    return operator, measured


def restart(cluster: Cluster, label: str, pythonpath: str | None, namespace: str = NS) -> dict[str, Any]:
    """A fresh operator measured until it settles, then stopped."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    # Only this tree's operator says when its take-over is done; another checkout's (--before) may not.
    operator, measured = fresh_replica(
        cluster, namespace, f"operator-restart-{label}.log", env, wait_started=True, first_pass=not pythonpath
    )
    stop_operator(operator)
    return {"label": label, **measured}


def main() -> None:
    stop_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=4, help="restarts of each operator")
    parser.add_argument("--before", default="", help="another checkout: its operator alternates with this one's")
    parser.add_argument("--waiting", action="store_true", help="sessions on a missing warm pool (no claims)")
    parser.add_argument("--no-wait", action="store_true", help="restart without waiting for every session Ready")
    args = parser.parse_args()
    namespace = NS_WAITING if args.waiting else NS
    cluster, started_cluster, _, api = bench_cluster()
    sides: list[tuple[str, str | None]] = [("this", None)]
    if args.before:
        sides.insert(0, ("before", checkout_pythonpath(args.before)))
    results: list[dict[str, Any]] = []
    try:
        populate(cluster, api, args.sessions, args.waiting, not args.no_wait)
        for round_ in range(args.rounds):
            order = sides if round_ % 2 == 0 else sides[::-1]
            for label, path in order:
                r = restart(cluster, label, path, namespace)
                results.append(r)
                said = f", first pass done {r['first_pass_s']} s {r['phases']}" if "first_pass_s" in r else ""
                print(
                    f"{time.strftime('%H:%M:%S')} {label}: settled in {r['settled_s']:.1f} s{said},"
                    f" CPU {r['cpu_s']:.1f} s,"
                    f" peak {r['peak_mib']:.0f} MiB (settled {r['settled_mib']:.0f}), requests {r['requests']},"
                    f" load {load_average():.1f}",
                    flush=True,
                )
    finally:
        if started_cluster:
            cluster.down()
    what = "waiting sessions (missing pool)" if args.waiting else "sessions"
    print(f"\nA fresh replica taking over {args.sessions} {what} (medians of {args.rounds} restarts each)")
    print(
        f"{'operator':>8} {'settled s':>9} {'CPU s':>7} {'peak MiB':>8} {'settled MiB':>11} {'peak/settled':>12}"
        f" {'GETs':>7} {'LISTs':>6} {'writes':>7}"
    )
    medians: dict[str, dict[str, float]] = {}
    for label, _ in sides:
        rows = [r for r in results if r["label"] == label]
        m = {
            "settled_s": statistics.median(r["settled_s"] for r in rows),
            "cpu_s": statistics.median(r["cpu_s"] for r in rows),
            "peak_mib": statistics.median(r["peak_mib"] for r in rows),
            "settled_mib": statistics.median(r["settled_mib"] for r in rows),
            "peak_ratio": statistics.median(r["peak_mib"] / r["settled_mib"] for r in rows),
            "get": statistics.median(r["gets"] for r in rows),
            "list": statistics.median(r["lists"] for r in rows),
            "write": statistics.median(r["writes"] for r in rows),
        }
        medians[label] = m
        print(
            f"{label:>8} {m['settled_s']:>9.1f} {m['cpu_s']:>7.1f} {m['peak_mib']:>8.0f} {m['settled_mib']:>11.0f}"
            f" {m['peak_ratio']:>12.2f} {m['get']:>7.0f}"
            f" {m['list']:>6.0f} {m['write']:>7.0f}"
        )
    name = "bench_restart_waiting" if args.waiting else "bench_restart"  # a results file each
    record = Record.start(name, rounds=args.rounds, sessions=args.sessions, waiting=args.waiting)
    for r in results:
        for key in ("first_pass_s", "settled_s", "cpu_s", "peak_mib", "settled_mib", "gets", "lists", "writes"):
            if r.get(key) is not None:
                record.sample(r["label"], key, float(r[key]))
    record.finish("s, MiB, requests")
    if "before" in medians:
        b, t = medians["before"], medians["this"]
        print(
            f"   ratio {t['settled_s'] / b['settled_s']:>9.2f} {t['cpu_s'] / b['cpu_s']:>7.2f}"
            f" {t['peak_mib'] / b['peak_mib']:>8.2f} {t['settled_mib'] / b['settled_mib']:>11.2f}   (this / before)"
        )


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
