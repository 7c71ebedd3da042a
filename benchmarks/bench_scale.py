"""One operator replica, thousands of sessions: reap precision, memory, idle CPU, writes per report.

Sessions use a pause-image template (this measures the operator, not runtimes). Idle timeouts are
spread over a window so deadlines arrive steadily, not all at once. Prints one table.
Run: `.venv/bin/python -m benchmarks.bench_scale [--sessions 2000] [--window 120]`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import os
import statistics
import threading
import time
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--window", type=float, default=120.0, help="idle timeouts spread over this many seconds")
    parser.add_argument(
        "--base-idle",
        type=float,
        default=0.0,
        help="shortest idle timeout (default: 0.3 s per session, at least 60 s, so that all are "
        "Ready and sit idle before the first deadline)",
    )
    args = parser.parse_args()
    n = args.sessions
    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up()
    config.load_kube_config()
    cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = 32
    api = client.CustomObjectsApi(client.ApiClient(cfg))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "crds/")
    cluster.kubectl("create", "namespace", NS)
    cluster.kubectl(
        "apply",
        "-n",
        NS,
        "-f",
        "-",
        input=yaml.safe_dump_all([manifests.template("pause"), manifests.warm_pool("pool", "pause", 0)]),
    )
    log = open(cluster.paths.logs / "operator-bench.log", "wb")  # noqa: SIM115 - closed in finally
    operator = start_operator("--log-level", "WARNING", stdout=log)
    deletions = ClaimDeletions(api)
    try:
        time.sleep(3)
        base_idle = args.base_idle or max(60.0, n * 0.3)
        deletions.start()  # before any session exists: no reap can be missed
        t0 = time.monotonic()
        from concurrent.futures import ThreadPoolExecutor

        def create(i: int) -> None:
            idle = base_idle + args.window * i / max(n - 1, 1)
            body = manifests.session(f"s{i:05d}", "pool", idleTimeout=f"{idle:.0f}s")
            api.create_namespaced_custom_object(GROUP, VERSION, NS, "agentsessions", body)

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(create, range(n)))
        created = time.monotonic() - t0
        while True:
            items = api.list_namespaced_custom_object(GROUP, VERSION, NS, "agentsessions")["items"]
            ready = sum(bool((s.get("status") or {}).get("readyAt")) for s in items)  # Ready at least once
            if ready == n:
                break
            if time.monotonic() - t0 > 1800:
                raise TimeoutError(f"only {ready}/{n} Ready after 30 min")
            time.sleep(1)
        all_ready = time.monotonic() - t0
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
        reporters = [f"s{i:05d}" for i in range(n - 100, n)]  # the last deadlines: not reaped yet
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
        rows: list[tuple[str, Any, str]] = [
            ("sessions", n, ""),
            ("idle timeouts spread over", f"{base_idle:.0f}-{base_idle + args.window:.0f} s", ""),
            ("created (client side)", f"{created:.1f} s", ""),
            ("time until all Ready", f"{all_ready:.1f} s", ""),
            ("still Ready then (not yet idle)", f"{not_idle_yet} / {n}", f"(CPU measured over {quiet:.0f} s)"),
            ("operator CPU while idle", f"{100 * idle_cpu:.2f} % of a core", "< 5 %"),
            ("API writes per activity report", f"{writes_per_report:.2f}", "(1 = the client's own patch)"),
            ("reaped / measured", f"{len(lags)} / {len(deadline_by_claim)}", ""),
            ("reap lag p50", f"{statistics.median(lags):.2f} s" if lags else "n/a", ""),
            ("reap lag p99", f"{percentile(lags, 0.99):.2f} s" if lags else "n/a", "<= 2 s"),
            ("reaped before the deadline", early, "0"),
            ("operator peak RSS", f"{peak:.0f} MiB", "<= 300 MB"),
        ]
        for name, value, target in rows:
            print(f"{name:<34} {value!s:>22}  {target}")
    finally:
        deletions.stop.set()
        stop_operator(operator)
        log.close()
        cluster.kubectl("delete", "namespace", NS, "--wait=false")
        if started_cluster:
            cluster.down()


if __name__ == "__main__":
    main()
