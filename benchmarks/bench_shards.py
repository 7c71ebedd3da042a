"""What a shard saves (issue 54 item 2): one replica against two replicas sharing 2 shards (--shards 2) on the
same N sessions, beside the operator's base measured in the same run.

The sessions are spread over `--namespaces` namespaces and created once through a single operator: live ones
(a pause-image pool on the kwok node: a claim, a Sandbox and a NetworkPolicy each), or with `--waiting` ones
on a warm pool that does not exist (no children: 10,000 populate in minutes where live ones take over an hour
and a half here; every take-over still passes each one). Then rounds rotate four modes, the order shifted
every round:

- base: one replica given `--namespace` of an empty namespace (it lists and caches nothing else): what a
  replica holds before any session, started and measured as the others are;
- sharded base: the same with `--shards 2` (it holds both shards): what the shards' machinery adds to it;
- single: one replica, cluster-wide;
- sharded: two replicas, `--shards 2`.

Each mode's replicas are fresh processes, measured once their take-over is done (their own "first pass done"
line) and then at rest (under 5 % of a core for 3 s, as bench_restart): RSS then (VmRSS) and the peak
(VmHWM). Then the session replicas' deadlines: `--sample` sessions (spread over every namespace, so over both
shards) get a TTL ending over the next `--window` seconds; lateness = the Expired phase seen on this process's
watch - the deadline. Sharded rounds also SIGKILL the holder of shard 0 one second before a deadline in that
shard: failover = kill -> the survivor holding every shard Lease; first action = kill -> that session seen
Expired. Live sessions: a watch of every claim counts sessions that ever had two claims (duplicates).

Targets (issue 54 item 2): each sharded replica's RSS above the base <= 0.55x the single replica's above the
base; kill -> the first action in the dead replica's shard <= 15 s. Writes per shard and term (no two replicas
in one term) are shown by tests/e2e/test_shards.py, not here. The results file keeps every sample.
Run: `.venv/bin/python -m benchmarks.bench_shards --sessions 10000 --rounds 2 [--waiting]`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.bench_restart import MISSING_POOL, settle
from benchmarks.bench_scale import percentile
from benchmarks.common import bench_cluster, load_average, start_operator, stop_on_sigterm, stop_operator
from benchmarks.populate import create_sessions, list_sessions, phase, wait_populated
from benchmarks.results import Record
from benchmarks.watches import ClaimWatch, ExpiredWatch, Key
from devcluster import errors
from devcluster.cluster import Cluster, Paths

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)

from kubernetes import client

from agentsession_operator.kube.election import sharding
from testkit import manifests

GROUP, VERSION = "agentsession.dev", "v1alpha1"
SHARDS = 2
THREADS = 16
LEASE_NS = "default"  # the benchmark's kubeconfig context namespace: where the operators keep their Leases
LEAD = 10.0  # seconds from setting the TTLs to the first deadline: the replicas' passes see them first
MEMORY_TARGET = 0.55  # each sharded replica's RSS above the base, against the single one's
FIRST_ACTION_TARGET = 15.0  # seconds from the kill to the first action in the dead replica's shard


def prefix(waiting: bool) -> str:
    return "bench-shards-waiting" if waiting else "bench-shards"


def namespaces(count: int, waiting: bool) -> list[str]:
    return [f"{prefix(waiting)}-{i:02d}" for i in range(count)]


def all_sessions(api: client.CustomObjectsApi, waiting: bool) -> list[dict[str, Any]]:
    ours = prefix(waiting) + "-"
    return [s for s in list_sessions(api) if s["metadata"]["namespace"].startswith(ours)]


def key_of(session: dict[str, Any]) -> Key:
    return session["metadata"]["namespace"], session["metadata"]["name"]


def populated(session: dict[str, Any], waiting: bool) -> bool:
    """Ready (live) or given a phase (waiting), and not used by an earlier run (no TTL)."""
    if (session.get("spec") or {}).get("ttl"):
        return False
    if waiting:
        return phase(session) not in (None, "", "Expired")
    return phase(session) == "Ready"


def populate(cluster: Cluster, api: client.CustomObjectsApi, n: int, spaces: list[str], waiting: bool) -> None:
    """Create sessions (round-robin over the namespaces) through one operator until `n` fresh ones are populated."""
    sessions = all_sessions(api, waiting)
    existing = {key_of(s) for s in sessions}
    if sum(populated(s, waiting) for s in sessions) >= n:
        return
    for ns in spaces:
        cluster.kubectl("create", "namespace", ns, check=False)
        if not waiting:
            docs = [manifests.template("pause"), manifests.warm_pool("pool", "pause", 0)]
            cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
    log = open(cluster.paths.logs / "operator-shards-populate.log", "ab")  # noqa: SIM115
    operator = start_operator("--log-level", "WARNING", stdout=log)
    pool = MISSING_POOL if waiting else "pool"
    try:
        # Names after every existing one (an earlier run's expired sessions were deleted, never reused).
        start = 1 + max((int(name[1:]) for _, name in existing), default=0)
        missing = n - sum(populated(s, waiting) for s in sessions)
        todo = [(spaces[i % len(spaces)], f"s{i:05d}") for i in range(start, start + missing)]
        create_sessions(api, todo, lambda name: manifests.session(name, pool, idleTimeout="8h"), threads=THREADS)
        # Live: at this machine's 8 to 10 sessions Ready a second (bench_scale), 10,000 take 20 minutes and more.
        wait_populated(lambda: count_populated(api, waiting), n, max(1200, n * 0.6), "populated")
    finally:
        stop_operator(operator)


def count_populated(api: client.CustomObjectsApi, waiting: bool) -> int:
    return sum(populated(s, waiting) for s in all_sessions(api, waiting))


@dataclass
class Replica:
    """One started operator and its own log (INFO: its start and first-pass lines are what `settle` waits on)."""

    proc: subprocess.Popen[bytes]
    log: Path
    offset: int


def start_replicas(cluster: Cluster, mode: str, round_: int, empty: str) -> list[Replica]:
    replicas = []
    for name in ("a", "b") if mode == "sharded" else ("a",):
        path = cluster.paths.logs / f"operator-shards-{mode}-{name}.log"
        with open(path, "ab") as log:
            offset = log.tell()
            env = dict(os.environ, POD_NAME=f"bench-{name}{round_}")
            extra = {
                "sharded": ("--shards", str(SHARDS)),
                "base": ("--namespace", empty),
                "sharded base": ("--shards", str(SHARDS), "--namespace", empty),
            }.get(mode, ())
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


def set_ttl(api: client.CustomObjectsApi, session: dict[str, Any], at: dt.datetime) -> dt.datetime:
    """Give the session a TTL that ends near `at` (whole seconds from its creation); its exact deadline."""
    namespace, name = key_of(session)
    created = dt.datetime.fromisoformat(session["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    ttl = max(1, round((at - created).total_seconds()))
    api.patch_namespaced_custom_object(GROUP, VERSION, namespace, "agentsessions", name, {"spec": {"ttl": f"{ttl}s"}})
    return created + dt.timedelta(seconds=ttl)


def lateness(
    api: client.CustomObjectsApi, seen: ExpiredWatch, sample: list[dict[str, Any]], window: float
) -> list[float]:
    """TTLs for the sample, deadlines spread over `window` from LEAD s on; each deadline -> Expired seen."""
    start = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=LEAD)

    def one(item: tuple[int, dict[str, Any]]) -> tuple[Key, dt.datetime]:
        index, session = item
        at = start + dt.timedelta(seconds=window * index / max(1, len(sample) - 1))
        return key_of(session), set_ttl(api, session, at)

    with ThreadPoolExecutor(8) as threads:
        deadlines = dict(threads.map(one, enumerate(sample)))
    end = max(deadlines.values()) + dt.timedelta(seconds=60)
    while dt.datetime.now(dt.UTC) < end and not all(k in seen.expired_at for k in deadlines):
        time.sleep(0.2)
    return [(seen.expired_at[k] - d).total_seconds() if k in seen.expired_at else 60.0 for k, d in deadlines.items()]


def failover(
    api: client.CustomObjectsApi,
    leases: client.CoordinationV1Api,
    seen: ExpiredWatch,
    procs: list[subprocess.Popen[bytes]],
    round_: int,
    sessions: list[dict[str, Any]],
) -> dict[str, float]:
    """SIGKILL the holder of shard 0 a second before a deadline in it: the survivor's take-over of every Lease,
    and that session's expiry (the first action in the dead replica's shard)."""
    owner = holders(leases)[0]
    victim = procs[0] if owner.startswith(f"bench-a{round_}_") else procs[1]
    survivor_name = f"bench-b{round_}_" if victim is procs[0] else f"bench-a{round_}_"
    session = next(s for s in sessions if sharding.shard_of(key_of(s)[0], SHARDS) == 0)
    sessions.remove(session)  # expired: never sampled again
    deadline = set_ttl(api, session, dt.datetime.now(dt.UTC) + dt.timedelta(seconds=3))
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
    while key_of(session) not in seen.expired_at and time.monotonic() - killed < 90:
        time.sleep(0.1)
    expired = seen.expired_at.get(key_of(session))
    assert survivor.poll() is None
    return {
        "failover_s": lease_s,
        "first_action_after_kill_s": (expired - killed_wall).total_seconds() if expired else 90.0,
    }


def one_round(
    cluster: Cluster,
    api: client.CustomObjectsApi,
    leases: client.CoordinationV1Api,
    seen: ExpiredWatch,
    mode: str,
    round_: int,
    sessions: list[dict[str, Any]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    started = time.monotonic()
    replicas = start_replicas(cluster, mode, round_, f"{prefix(args.waiting)}-empty")
    procs = [r.proc for r in replicas]
    try:
        with ThreadPoolExecutor(len(replicas)) as threads:
            # Each replica's own end of take-over (its "first pass done" line), then its CPU at rest.
            settled = list(threads.map(lambda r: settle(r.proc, started, r.log, r.offset, first_pass=True), replicas))
        row: dict[str, Any] = {
            "mode": mode,
            "first_pass_s": max(s["first_pass_s"] for s in settled),
            "rss_mib": max(s["settled_mib"] for s in settled),  # the larger replica's
            "peak_mib": max(s["peak_mib"] for s in settled),
        }
        if mode.endswith("base"):
            return row
        sample = sessions[: args.sample]
        del sessions[: args.sample]  # expired: never sampled again
        late = lateness(api, seen, sample, args.window)
        row.update(late_p50_s=statistics.median(late), late_max_s=max(late), late_p99_s=percentile(late, 0.99))
        if mode == "sharded":
            row.update(failover(api, leases, seen, procs, round_, sessions))
        return row
    finally:
        for proc in procs:
            if proc.poll() is None:
                stop_operator(proc)
        time.sleep(3)  # the released Leases' next round


def report(record: Record, rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    for row in rows:
        for column, value in row.items():
            if column != "mode":
                record.sample(row["mode"], column, value)
    medians = record.medians()
    base = medians["base"]["rss_mib"]
    above = {mode: medians[mode]["rss_mib"] - base for mode in ("single", "sharded")}
    for mode in above:
        medians[mode]["rss_above_base_mib"] = above[mode]
    # What the sessions cost each, apart from the shards' fixed machinery: each mode above its own base.
    sharded_base = medians["sharded base"]["rss_mib"]
    medians["sharded"]["rss_above_sharded_base_mib"] = medians["sharded"]["rss_mib"] - sharded_base
    ratios = {
        "sharded / single, RSS above the base (each replica, the larger)": above["sharded"] / above["single"],
        "sharded above the sharded base / single above the base": (medians["sharded"]["rss_mib"] - sharded_base)
        / above["single"],
        "sharded / single, RSS": medians["sharded"]["rss_mib"] / medians["single"]["rss_mib"],
        "sharded / single, first pass": medians["sharded"]["first_pass_s"] / medians["single"]["first_pass_s"],
    }
    record.finish("MiB and s", medians, ratios)
    kind = "waiting" if args.waiting else "live"
    print(
        f"\n{args.sessions} {kind} sessions in {args.namespaces} namespaces; medians of {args.rounds} rounds per mode"
    )
    print(f"{'':>30} {'base':>7} {'single':>8} {'2 shards':>9} {'ratio':>6}  target")
    single, sharded = medians["single"]["rss_mib"], medians["sharded"]["rss_mib"]
    print(f"{'RSS settled, MiB':>30} {base:>7.0f} {single:>8.0f} {sharded:>9.0f} {sharded / single:>6.2f}")
    print(
        f"{'RSS above the base, MiB':>30} {'':>7} {above['single']:>8.0f} {above['sharded']:>9.0f}"
        f" {above['sharded'] / above['single']:>6.2f}  <= {MEMORY_TARGET}"
    )
    print(
        f"{'... each above its own base':>30} {'':>7} {above['single']:>8.0f} {sharded - sharded_base:>9.0f}"
        f" {(sharded - sharded_base) / above['single']:>6.2f}  (sharded base {sharded_base:.0f} MiB)"
    )
    for column, label in (("peak_mib", "RSS peak, MiB"), ("first_pass_s", "first pass done, s")):
        values = [medians[mode][column] for mode in ("base", "single", "sharded")]
        print(f"{label:>30} {values[0]:>7.1f} {values[1]:>8.1f} {values[2]:>9.1f} {values[2] / values[1]:>6.2f}")
    for column, label in (("late_p50_s", "deadline lateness p50, s"), ("late_max_s", "deadline lateness max, s")):
        print(f"{label:>30} {'':>7} {medians['single'][column]:>8.2f} {medians['sharded'][column]:>9.2f}")
    print(f"{'failover (every Lease), s':>30} {'':>7} {'':>8} {medians['sharded']['failover_s']:>9.1f}")
    print(
        f"{'kill -> first action, s':>30} {'':>7} {'':>8} {medians['sharded']['first_action_after_kill_s']:>9.1f}"
        f" {'':>6}  <= {FIRST_ACTION_TARGET:.0f}"
    )


def main() -> None:
    stop_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--namespaces", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2, help="rounds; each runs every mode, the order rotated")
    parser.add_argument("--sample", type=int, default=50, help="sessions given a deadline per mode and round")
    parser.add_argument("--window", type=float, default=20.0, help="the sample's deadlines spread over this")
    parser.add_argument("--waiting", action="store_true", help="sessions on a missing warm pool (no children)")
    args = parser.parse_args()
    cluster, started_cluster, cfg, api = bench_cluster()
    leases = client.CoordinationV1Api(client.ApiClient(cfg))
    spaces = namespaces(args.namespaces, args.waiting)
    seen = ExpiredWatch(api)
    claims = ClaimWatch(api)
    rows: list[dict[str, Any]] = []
    used: list[Key] = []
    try:
        populate(cluster, api, args.sessions, spaces, args.waiting)
        cluster.kubectl("create", "namespace", f"{prefix(args.waiting)}-empty", check=False)
        needed = args.rounds * (2 * args.sample + 1)
        # By name, so round-robin over the namespaces: every sample spans both shards.
        fresh = (s for s in all_sessions(api, args.waiting) if populated(s, args.waiting))
        sessions = sorted(fresh, key=lambda s: (s["metadata"]["name"], s["metadata"]["namespace"]))
        if len(sessions) < needed:
            raise SystemExit(f"{len(sessions)} fresh sessions, {needed} needed: raise --sessions")
        used = [key_of(s) for s in sessions]
        seen.start()
        if not args.waiting:  # waiting sessions have no claims to count
            claims.start()
        seen.ready.wait(120)
        name = "bench_shards_waiting" if args.waiting else "bench_shards"
        params = {k: v for k, v in vars(args).items() if k != "rounds"}
        record = Record.start(name, args.rounds, **params)
        modes = ["base", "single", "sharded", "sharded base"]
        for round_ in range(args.rounds):
            for mode in modes[round_ % len(modes) :] + modes[: round_ % len(modes)]:
                row = one_round(cluster, api, leases, seen, mode, round_, sessions, args)
                rows.append(row)
                print(f"{time.strftime('%H:%M:%S')} {row} load {load_average():.1f}", flush=True)
        if not args.waiting:
            record.sample("sharded", "duplicate_claims", claims.duplicates())
        report(record, rows, args)
    finally:
        seen.stop.set()
        claims.stop.set()
        # The sessions given a TTL are Expired: deleted, so the next run's population tops up with fresh ones.
        expired = [key for key in used if key in seen.expired_at]
        with ThreadPoolExecutor(8) as threads:
            list(threads.map(lambda key: _delete(api, key), expired))
        if started_cluster:
            cluster.down()


def _delete(api: client.CustomObjectsApi, key: Key) -> None:
    try:
        api.delete_namespaced_custom_object(GROUP, VERSION, key[0], "agentsessions", key[1])
    except client.ApiException as exc:
        if exc.status != 404:
            raise


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
