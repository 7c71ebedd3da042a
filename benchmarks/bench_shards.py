"""One replica against two replicas sharing 2 shards (--shards 2), on the same N live sessions: each
replica's memory, reap lag, duplicate claims, and a shard's failover.

The sessions (pause-image pool on the kwok node) are spread over `--namespaces` namespaces and created
once through a single operator. Then rounds alternate (single, sharded, sharded, single, ...): fresh
process(es) started, each measured until its take-over is done (its own "first pass done" line, issue 53
item 2: the seconds since its process started) and then at rest (under 5 % of a core for 3 s, as
bench_restart), then:

- first pass done (the later replica's), RSS of each replica at rest (VmRSS), and its peak (VmHWM);
- reap lag: a sample of sessions (spread over every namespace, so over both shards) get an idleTimeout
  whose deadlines fall over the next `--window` seconds; deadline -> the claim's DELETED event;
- sharded rounds only: SIGKILL one replica; failover = kill -> the survivor holding every shard Lease,
  and kill -> a session of the killed replica's shard reaped (its deadline set 1 s after the kill);
- all along, a watch of every claim: a session that ever had two claims (by owner UID) is a duplicate.

Prints a row per round and a table of medians, with sharded / single ratios.
Run: `.venv/bin/python -m benchmarks.bench_shards --sessions 10000 --rounds 2`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import os
import signal
import statistics
import subprocess
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.bench_restart import settle
from benchmarks.bench_scale import _idle_deadline, percentile
from benchmarks.common import load_average, start_operator, stop_operator
from benchmarks.populate import create_sessions, list_sessions, phase, wait_populated
from devcluster import errors
from devcluster.cluster import Cluster, Paths

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)

from kubernetes import client, config, watch

from agentsession_operator.kube.election import sharding
from testkit import manifests

PREFIX = "bench-shards"
GROUP, VERSION = "agentsession.dev", "v1alpha1"
EXT, EXT_VERSION = "extensions.agents.x-k8s.io", "v1beta1"
SHARDS = 2
THREADS = 16
LEASE_NS = "default"  # the benchmark's kubeconfig context namespace: where the operators keep their Leases


class ClaimWatch(threading.Thread):
    """Every claim of the cluster: the claim UIDs each owner session UID ever had, and deletion times."""

    def __init__(self, api: client.CustomObjectsApi) -> None:
        super().__init__(daemon=True)
        self.api = api
        self.by_owner: dict[str, set[str]] = defaultdict(set)
        self.deleted_at: dict[tuple[str, str], dt.datetime] = {}
        self.stop = threading.Event()

    def _see(self, kind: str, claim: dict[str, Any]) -> None:
        meta = claim["metadata"]
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "AgentSession":
                self.by_owner[ref["uid"]].add(meta["uid"])
        if kind == "DELETED":
            self.deleted_at.setdefault((meta["namespace"], meta["name"]), dt.datetime.now(dt.UTC))

    def run(self) -> None:
        version = ""
        while not self.stop.is_set():
            try:
                if not version:
                    listing = self.api.list_cluster_custom_object(EXT, EXT_VERSION, "sandboxclaims")
                    for item in listing["items"]:
                        self._see("LISTED", item)
                    version = listing["metadata"]["resourceVersion"]
                for event in watch.Watch().stream(
                    self.api.list_cluster_custom_object,
                    EXT,
                    EXT_VERSION,
                    "sandboxclaims",
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=60,
                ):
                    version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self._see(event["type"], event["object"])
                    if self.stop.is_set():
                        return
            except client.ApiException as exc:
                version = "" if exc.status == 410 else version
                time.sleep(0.5)
            except Exception:
                time.sleep(0.5)

    def duplicates(self) -> int:
        return sum(1 for claims in self.by_owner.values() if len(claims) > 1)


def namespaces(count: int) -> list[str]:
    return [f"{PREFIX}-{i:02d}" for i in range(count)]


def all_sessions(api: client.CustomObjectsApi) -> list[dict[str, Any]]:
    return [s for s in list_sessions(api) if s["metadata"]["namespace"].startswith(PREFIX)]


def populate(cluster: Cluster, api: client.CustomObjectsApi, n: int, spaces: list[str]) -> None:
    """Create sessions (round-robin over the namespaces) through one operator until `n` are Ready."""
    existing = {(s["metadata"]["namespace"], s["metadata"]["name"]) for s in all_sessions(api)}
    log = open(cluster.paths.logs / "operator-shards-populate.log", "ab")  # noqa: SIM115
    for ns in spaces:
        cluster.kubectl("create", "namespace", ns, check=False)
        docs = [manifests.template("pause"), manifests.warm_pool("pool", "pause", 0)]
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
    operator = start_operator("--log-level", "WARNING", stdout=log)
    try:
        wanted = [(spaces[i % len(spaces)], f"s{i:05d}") for i in range(n)]
        todo = [key for key in wanted if key not in existing]
        create_sessions(api, todo, lambda name: manifests.session(name, "pool", idleTimeout="8h"), threads=THREADS)
        # At this machine's 8 to 10 sessions Ready a second (bench_scale), 10,000 take 20 minutes; room for twice that.
        wait_populated(lambda: sum(phase(s) == "Ready" for s in all_sessions(api)), n, max(1200, n * 0.25))
    finally:
        stop_operator(operator)


@dataclass
class Replica:
    """One started operator and its own log (INFO: its start and first-pass lines are what `settle` waits on)."""

    proc: subprocess.Popen[bytes]
    log: Path
    offset: int


def start_replicas(cluster: Cluster, mode: str, round_: int) -> list[Replica]:
    replicas = []
    for name in ("a",) if mode == "single" else ("a", "b"):
        path = cluster.paths.logs / f"operator-shards-{mode}-{name}.log"
        with open(path, "ab") as log:
            offset = log.tell()
            env = dict(os.environ, POD_NAME=f"bench-{name}{round_}")
            extra = ("--shards", str(SHARDS)) if mode == "sharded" else ()
            proc = start_operator("--log-level", "INFO", *extra, stdout=log, env=env)
        replicas.append(Replica(proc, path, offset))
    return replicas


def holders(api: client.CoordinationV1Api) -> dict[int, str]:
    found = {}
    for shard in range(SHARDS):
        try:
            lease = api.read_namespaced_lease(sharding.shard_lease_name("agentsession-operator", shard), LEASE_NS)
            found[shard] = lease.spec.holder_identity or ""
        except client.ApiException:
            found[shard] = ""
    return found


def shorten(api: client.CustomObjectsApi, key: tuple[str, str], at: dt.datetime) -> dt.datetime:
    """Give the session an idleTimeout that ends near `at`; its exact deadline."""
    body = api.get_namespaced_custom_object(GROUP, VERSION, key[0], "agentsessions", key[1])
    since = _idle_deadline(body, 0)
    idle = max(1, round((at - since).total_seconds()))
    api.patch_namespaced_custom_object(
        GROUP, VERSION, key[0], "agentsessions", key[1], {"spec": {"idleTimeout": f"{idle}s"}}
    )
    return since + dt.timedelta(seconds=idle)


def reap_lags(
    api: client.CustomObjectsApi, claims: ClaimWatch, sample: list[tuple[str, str]], window: float
) -> list[float]:
    start = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=10)
    with ThreadPoolExecutor(8) as threads:
        deadlines = dict(
            zip(
                sample,
                threads.map(
                    lambda item: shorten(
                        api, item[1], start + dt.timedelta(seconds=window * item[0] / max(1, len(sample) - 1))
                    ),
                    enumerate(sample),
                ),
                strict=True,
            )
        )
    end = max(deadlines.values()) + dt.timedelta(seconds=30)
    while dt.datetime.now(dt.UTC) < end and not all(k in claims.deleted_at for k in sample):
        time.sleep(0.5)
    return [
        (claims.deleted_at[k] - d).total_seconds() if k in claims.deleted_at else 60.0 for k, d in deadlines.items()
    ]


def failover(
    api: client.CustomObjectsApi,
    leases: client.CoordinationV1Api,
    claims: ClaimWatch,
    procs: list[subprocess.Popen[bytes]],
    round_: int,
    live: list[tuple[str, str]],
) -> dict[str, float]:
    """SIGKILL the holder of shard 0; the survivor's take-over of its Lease, and a reap in that shard."""
    owner = holders(leases)[0]
    victim = procs[0] if owner.startswith(f"bench-a{round_}_") else procs[1]
    survivor_name = f"bench-b{round_}_" if victim is procs[0] else f"bench-a{round_}_"
    key = next(k for k in live if sharding.shard_of(k[0], SHARDS) == 0)
    live.remove(key)  # reaped: never sampled again
    deadline = shorten(api, key, dt.datetime.now(dt.UTC) + dt.timedelta(seconds=3))
    killed_wall = deadline - dt.timedelta(seconds=1)
    while dt.datetime.now(dt.UTC) < killed_wall:
        time.sleep(0.02)
    victim.kill()
    victim.wait()
    killed = time.monotonic()
    survivor = next(p for p in procs if p is not victim)
    # The survivor may hold both already (one replica can take both before the other's slot is seen).
    while not all(h.startswith(survivor_name) for h in holders(leases).values()) and time.monotonic() - killed < 60:
        time.sleep(0.1)
    lease_s = time.monotonic() - killed
    while key not in claims.deleted_at and time.monotonic() - killed < 90:
        time.sleep(0.1)
    reaped = claims.deleted_at.get(key)
    reap_s = (reaped - killed_wall).total_seconds() if reaped else 90.0
    assert survivor.poll() is None
    return {"failover_s": lease_s, "reap_after_kill_s": reap_s}


def one_round(
    cluster: Cluster,
    api: client.CustomObjectsApi,
    leases: client.CoordinationV1Api,
    claims: ClaimWatch,
    mode: str,
    round_: int,
    live: list[tuple[str, str]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    started = time.monotonic()
    replicas = start_replicas(cluster, mode, round_)
    procs = [r.proc for r in replicas]
    try:
        with ThreadPoolExecutor(len(replicas)) as threads:
            # Each replica's own end of take-over (its "first pass done" line), then its CPU at rest.
            settled = list(threads.map(lambda r: settle(r.proc, started, r.log, r.offset, first_pass=True), replicas))
        row: dict[str, Any] = {
            "mode": mode,
            "first_pass_s": max(s["first_pass_s"] for s in settled),
            "settled_s": max(s["settled_s"] for s in settled),
            "rss_mib": [round(s["settled_mib"]) for s in settled],
            "peak_mib": [round(s["peak_mib"]) for s in settled],
        }
        sample = live[: args.sample]
        del live[: args.sample]  # reaped: never sampled again
        lags = reap_lags(api, claims, sample, args.window)
        row.update(p50=statistics.median(lags), p99=percentile(lags, 0.99))
        if mode == "sharded":
            row.update(failover(api, leases, claims, procs, round_, live))
        return row
    finally:
        for proc in procs:
            if proc.poll() is None:
                stop_operator(proc)
        time.sleep(3)  # the released Leases' next round


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _interrupt)
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--namespaces", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each mode, interleaved")
    parser.add_argument("--sample", type=int, default=50, help="sessions reaped per round")
    parser.add_argument("--window", type=float, default=20.0, help="the reap sample's deadlines spread over this")
    args = parser.parse_args()
    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up()
    config.load_kube_config()
    cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = 32
    api = client.CustomObjectsApi(client.ApiClient(cfg))
    leases = client.CoordinationV1Api(client.ApiClient(cfg))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "crds/")
    spaces = namespaces(args.namespaces)
    claims = ClaimWatch(api)
    rows: list[dict[str, Any]] = []
    try:
        populate(cluster, api, args.sessions, spaces)
        claims.start()
        live = sorted(
            (
                (s["metadata"]["namespace"], s["metadata"]["name"])
                for s in all_sessions(api)
                if (s.get("status") or {}).get("phase") == "Ready"
            ),
            key=lambda k: (k[1], k[0]),  # round-robin over namespaces: every sample spans both shards
        )
        for round_ in range(args.rounds):
            for mode in ("single", "sharded") if round_ % 2 == 0 else ("sharded", "single"):
                row = one_round(cluster, api, leases, claims, mode, round_, live, args)
                rows.append(row)
                print(f"{time.strftime('%H:%M:%S')} {row} load {load_average():.1f}", flush=True)
    finally:
        claims.stop.set()
        if started_cluster:
            cluster.down()
    single = [r for r in rows if r["mode"] == "single"]
    sharded = [r for r in rows if r["mode"] == "sharded"]
    one = statistics.median(r["rss_mib"][0] for r in single)
    each = statistics.median(max(r["rss_mib"]) for r in sharded)
    print(f"\n{args.sessions} sessions in {args.namespaces} namespaces; medians of {args.rounds} rounds per mode")
    print(f"{'':>26} {'single':>8} {'2 shards':>9} {'ratio':>6}  target")
    print(f"{'RSS settled, MiB (max)':>26} {one:>8.0f} {each:>9.0f} {each / one:>6.2f}  <= 0.6")
    peak1 = statistics.median(r["peak_mib"][0] for r in single)
    peak2 = statistics.median(max(r["peak_mib"]) for r in sharded)
    print(f"{'RSS peak, MiB (max)':>26} {peak1:>8.0f} {peak2:>9.0f} {peak2 / peak1:>6.2f}")
    s1 = statistics.median(r["settled_s"] for r in single)
    s2 = statistics.median(r["settled_s"] for r in sharded)
    print(f"{'settled after start, s':>26} {s1:>8.1f} {s2:>9.1f} {s2 / s1:>6.2f}")
    f1 = statistics.median(r["first_pass_s"] for r in single)
    f2 = statistics.median(r["first_pass_s"] for r in sharded)
    print(f"{'first pass done, s':>26} {f1:>8.1f} {f2:>9.1f} {f2 / f1:>6.2f}")
    for key, label in (("p50", "reap lag p50, s"), ("p99", "reap lag p99, s")):
        a, b = statistics.median(r[key] for r in single), statistics.median(r[key] for r in sharded)
        print(f"{label:>26} {a:>8.2f} {b:>9.2f} {'':>6}  {'<= 1' if key == 'p99' else ''}")
    print(
        f"{'failover (Lease), s':>26} {'':>8} {statistics.median(r['failover_s'] for r in sharded):>9.1f}"
        f" {'':>6}  <= 15"
    )
    print(
        f"{'kill -> reap in shard, s':>26} {'':>8} {statistics.median(r['reap_after_kill_s'] for r in sharded):>9.1f}"
    )
    print(f"{'duplicate claims':>26} {claims.duplicates():>18}        0")


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
