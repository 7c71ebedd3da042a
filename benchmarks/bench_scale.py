"""One operator replica, thousands of sessions: reap precision, memory, idle CPU, writes per report,
creation throughput against the same number of claims created directly.

Sessions use a pause-image template (this measures the operator, not runtimes). Idle timeouts are
spread over a window so deadlines arrive steadily, not all at once. For each point (a number of
sessions; a fresh operator process and namespace each): first N SandboxClaims created directly (the
object the SDK creates) until all are Ready, deleted again; then N AgentSessions through the
operator, the same way. Prints a table per point, then one row per point (how cost grows), and
writes the rows as JSON (`--json`) for `benchmarks.plot_scale`.
Run: `.venv/bin/python -m benchmarks.bench_scale [--points 100,1000,5000] [--window 60]`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import start_operator, stop_operator
from devcluster.cluster import Cluster, Paths

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)

from kubernetes import client, config, watch

from tests.e2e import manifests

NS = "bench-scale"
GROUP, VERSION = "agentsession.dev", "v1alpha1"
EXT, EXT_VERSION = "extensions.agents.x-k8s.io", "v1beta1"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def apiserver_writes(cluster: Cluster) -> float:
    """PATCH and UPDATE requests the API server served for agentsessions (any subresource)."""
    total = 0.0
    for line in cluster.api_get("/metrics", timeout=30).decode().splitlines():
        if (
            line.startswith("apiserver_request_total{")
            and 'resource="agentsessions"' in line
            and ('verb="PATCH"' in line or 'verb="UPDATE"' in line)
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


class ClaimDeletions(threading.Thread):
    """Records when each claim's DELETED event is seen (the reap moment)."""

    def __init__(self, api: client.CustomObjectsApi) -> None:
        super().__init__(daemon=True)
        self.api = api
        self.deleted: dict[str, dt.datetime] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        w = watch.Watch()
        while not self.stop.is_set():
            try:
                for event in w.stream(
                    self.api.list_namespaced_custom_object,
                    "extensions.agents.x-k8s.io",
                    "v1beta1",
                    NS,
                    "sandboxclaims",
                    timeout_seconds=30,
                ):
                    if event["type"] == "DELETED":
                        self.deleted[event["object"]["metadata"]["name"]] = dt.datetime.now(dt.UTC)
                    if self.stop.is_set():
                        return
            except Exception:
                time.sleep(0.2)


def _claim_ready(claim: dict[str, Any]) -> bool:
    conditions = (claim.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _poll_until(count: Callable[[], int], n: int, t0: float, what: str) -> float:
    """Seconds from t0 until count() reaches n (polled every 0.2 s)."""
    while True:
        done = count()
        if done >= n:
            return time.monotonic() - t0
        if time.monotonic() - t0 > 1800:
            raise TimeoutError(f"only {done}/{n} {what} after 30 min")
        time.sleep(0.2)


def direct_claims(api: client.CustomObjectsApi, n: int) -> float:
    """Seconds until n SandboxClaims created directly (16 threads, as the sessions) are all Ready."""
    t0 = time.monotonic()

    def create(i: int) -> None:
        api.create_namespaced_custom_object(EXT, EXT_VERSION, NS, "sandboxclaims", manifests.claim(f"d{i:05d}", "pool"))

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create, range(n)))

    def ready() -> int:
        return sum(map(_claim_ready, api.list_namespaced_custom_object(EXT, EXT_VERSION, NS, "sandboxclaims")["items"]))

    return _poll_until(ready, n, t0, "claims Ready")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", default="100,1000,5000", help="numbers of sessions, one run each")
    parser.add_argument("--sessions", type=int, default=0, help="a single point (overrides --points)")
    parser.add_argument("--window", type=float, default=60.0, help="idle timeouts spread over this many seconds")
    parser.add_argument(
        "--per-session",
        type=float,
        default=0.08,
        help="shortest idle timeout per session (at least 60 s), so that all are Ready and sit idle "
        "before the first deadline",
    )
    parser.add_argument("--json", default="", help="write the per-point rows here")
    args = parser.parse_args()
    points = [args.sessions] if args.sessions else [int(p) for p in args.points.split(",")]
    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up()
    config.load_kube_config()
    cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = 32
    api = client.CustomObjectsApi(client.ApiClient(cfg))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "crds/")
    results: list[dict[str, Any]] = []
    try:
        for n in points:
            results.append(run_point(cluster, api, n, args))
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    finally:
        if started_cluster:
            cluster.down()
    print("\nHow cost grows (one operator replica; creation: sessions Ready per second vs claims created directly)")
    print(
        f"{'sessions':>8} {'RSS MiB':>8} {'reap p50 s':>10} {'reap p99 s':>10} {'early':>5} {'idle CPU %':>10} "
        f"{'writes/rep':>10} {'sessions/s':>10} {'claims/s':>8} {'ratio':>6}"
    )
    for r in results:
        print(
            f"{r['sessions']:>8} {r['rss_mib']:>8.0f} {r['reap_p50']:>10.2f} {r['reap_p99']:>10.2f} {r['early']:>5} "
            f"{r['idle_cpu_pct']:>10.2f} {r['writes_per_report']:>10.2f} {r['session_rate']:>10.1f} "
            f"{r['claim_rate']:>8.1f} {r['session_rate'] / r['claim_rate']:>6.2f}"
        )
    print("targets: reap p99 <= 1 s, 0 early, RSS <= 400 MiB, idle CPU < 2 %, writes/report 2, ratio >= 0.9")


def _wait_namespace_gone(cluster: Cluster) -> None:
    # kubectl's own --wait outlasts Cluster.kubectl's timeout with thousands of objects: poll instead.
    cluster.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false")
    deadline = time.monotonic() + 1200
    while cluster.kubectl("get", "namespace", NS, "--ignore-not-found", "-o", "name").stdout.strip():
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {NS} still there after 20 min")
        time.sleep(2)


def run_point(cluster: Cluster, api: client.CustomObjectsApi, n: int, args: argparse.Namespace) -> dict[str, Any]:
    _wait_namespace_gone(cluster)
    cluster.kubectl("create", "namespace", NS)
    cluster.kubectl(
        "apply",
        "-n",
        NS,
        "-f",
        "-",
        input=yaml.safe_dump_all([manifests.template("pause"), manifests.warm_pool("pool", "pause", 0)]),
    )
    # The direct claims first, without the operator running: agent-sandbox's own throughput.
    claims_ready = direct_claims(api, n)
    cluster.kubectl("delete", "sandboxclaims", "-n", NS, "--all", "--wait=false")

    def claims_left() -> int:
        return -len(api.list_namespaced_custom_object(EXT, EXT_VERSION, NS, "sandboxclaims")["items"])

    _poll_until(claims_left, 0, time.monotonic(), "claims deleted")
    log = open(cluster.paths.logs / "operator-bench.log", "wb")  # noqa: SIM115 - closed in finally
    operator = start_operator("--log-level", "WARNING", stdout=log)
    deletions = ClaimDeletions(api)
    try:
        time.sleep(3)
        base_idle = max(60.0, n * args.per_session)
        deletions.start()  # before any session exists: no reap can be missed
        t0 = time.monotonic()

        def create(i: int) -> None:
            idle = base_idle + args.window * i / max(n - 1, 1)
            body = manifests.session(f"s{i:05d}", "pool", idleTimeout=f"{idle:.0f}s")
            api.create_namespaced_custom_object(GROUP, VERSION, NS, "agentsessions", body)

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(create, range(n)))
        created = time.monotonic() - t0
        cpu_start = proc_cpu_seconds(operator.pid)
        listed: list[list[dict[str, Any]]] = [[]]

        def ever_ready() -> int:
            listed[0] = api.list_namespaced_custom_object(GROUP, VERSION, NS, "agentsessions")["items"]
            return sum(bool((s.get("status") or {}).get("readyAt")) for s in listed[0])  # Ready at least once

        all_ready = _poll_until(ever_ready, n, t0, "sessions Ready")
        creation_cpu = (proc_cpu_seconds(operator.pid) - cpu_start) / all_ready  # busy share of one core
        items = listed[0]
        not_idle_yet = sum((s.get("status") or {}).get("phase") == "Ready" for s in items)

        def deadline(session: dict[str, Any]) -> dt.datetime:
            status, spec = session["status"], session["spec"]
            last = ts(status.get("lastActivityTime") or status["readyAt"])
            return last + dt.timedelta(seconds=float(spec["idleTimeout"].rstrip("s")))

        # No activity is reported (but by the reporters below): the deadline is last activity + idleTimeout.
        deadline_by_claim = {s["status"]["claimName"]: deadline(s) for s in items}
        first_deadline = min(deadline_by_claim.values())

        # Idle CPU: nothing happens to these sessions for a while (before the first deadline).
        quiet = min(30.0, max(5.0, (first_deadline - dt.datetime.now(dt.UTC)).total_seconds() - 5))
        cpu0, w0 = proc_cpu_seconds(operator.pid), time.monotonic()
        time.sleep(quiet)
        idle_cpu = (proc_cpu_seconds(operator.pid) - cpu0) / (time.monotonic() - w0)

        # API writes per activity report: 100 reports on 100 sessions, counted by the API server.
        before = apiserver_writes(cluster)
        reporters = [f"s{i:05d}" for i in range(n - min(100, n // 10), n)]  # the last deadlines: not reaped yet
        for name in reporters:
            stamp = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
            api.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                NS,
                "agentsessions",
                name,
                {"metadata": {"annotations": {"agentsession.dev/activity": f"{stamp} busy=0"}}},
            )
        time.sleep(5)
        writes_per_report = (apiserver_writes(cluster) - before) / len(reporters)

        # Reap lag: deadline (status.idleDeadline) -> the claim's DELETED event. The reporters' deadlines
        # moved with their reports: they are left out.
        for name in reporters:
            deadline_by_claim.pop(name, None)  # claim name == session name here (short names)
        end = time.monotonic() + args.window + base_idle + 120
        while time.monotonic() < end and len(deletions.deleted) < n:
            time.sleep(2)
        lags = [
            (deletions.deleted[c] - d).total_seconds() for c, d in deadline_by_claim.items() if c in deletions.deleted
        ]
        early = sum(lag < -1.0 for lag in lags)  # deadlines have one-second resolution
        peak = proc_peak_rss_mib(operator.pid)
        rate, claim_rate = n / all_ready, n / claims_ready
        rows: list[tuple[str, Any, str]] = [
            ("sessions", n, ""),
            ("idle timeouts spread over", f"{base_idle:.0f}-{base_idle + args.window:.0f} s", ""),
            ("created (client side)", f"{created:.1f} s", ""),
            ("time until all Ready", f"{all_ready:.1f} s", f"{rate:.1f} sessions/s"),
            ("same number of claims, direct", f"{claims_ready:.1f} s", f"{claim_rate:.1f} claims/s"),
            ("creation throughput ratio", f"{rate / claim_rate:.2f}", ">= 0.9"),
            (
                "operator CPU while creating",
                f"{100 * creation_cpu:.0f} % of a core",
                "(100 %: the operator is the bottleneck)",
            ),
            ("still Ready then (not yet idle)", f"{not_idle_yet} / {n}", f"(CPU measured over {quiet:.0f} s)"),
            ("operator CPU while idle", f"{100 * idle_cpu:.2f} % of a core", "< 2 %"),
            ("API writes per activity report", f"{writes_per_report:.2f}", "2 (1 = the client's own patch)"),
            ("reaped / measured", f"{len(lags)} / {len(deadline_by_claim)}", ""),
            ("reap lag p50", f"{statistics.median(lags):.2f} s" if lags else "n/a", ""),
            ("reap lag p99", f"{percentile(lags, 0.99):.2f} s" if lags else "n/a", "<= 1 s"),
            ("reaped before the deadline", early, "0"),
            ("operator peak RSS", f"{peak:.0f} MiB", "<= 400 MiB"),
        ]
        for name, value, target in rows:
            print(f"{name:<34} {value!s:>22}  {target}")
        return {
            "sessions": n,
            "rss_mib": peak,
            "reap_p50": statistics.median(lags) if lags else float("nan"),
            "reap_p99": percentile(lags, 0.99) if lags else float("nan"),
            "early": early,
            "reaped": len(lags),
            "measured": len(deadline_by_claim),
            "idle_cpu_pct": 100 * idle_cpu,
            "writes_per_report": writes_per_report,
            "session_rate": rate,
            "claim_rate": claim_rate,
            "created_s": created,
            "creation_cpu_pct": 100 * creation_cpu,
        }
    finally:
        deletions.stop.set()
        stop_operator(operator)
        log.close()


if __name__ == "__main__":
    main()
