"""Deadlines across a handover (issue 53 item 4): how late a session's TTL is acted on when it falls while
the leader hands over to its standby, against the same in a quiet period, rounds interleaved.

N sessions wait on a missing warm pool (bench_restart --waiting's kind of population, in a namespace of its
own: no pod each, so 10,000 populate in minutes, and a take-over still passes every one of them). A leader
and a warm standby (a Deployment of 2) run on them, with their own Lease. Each round has one window of each
kind, in turn:

- quiet: `--sample` sessions get a TTL ending over the next `--window` seconds; nothing else happens;
- handover: the same, and as the window opens (its first deadline) the leader is stopped as a rolling update
  stops it (SIGTERM: it stops acting, drains its writes and releases the Lease) and the standby takes over; the
  standby is started fresh (the update's next pod) and measured settled before the window;
- with `--before DIR`: a handover to a standby of that checkout (e.g. `git archive <commit> api operator`),
  so both orders of a take-over are measured in one run on the same sessions.

Lateness = the session's Expired phase seen on this process's watch - its deadline (creationTimestamp +
TTL, whole seconds). Per handover also: SIGTERM -> the standby holding the Lease, and the new leader's own
"first pass done" line (seconds of its passes). Prints medians and maxima per kind; target: every deadline
acted on within 5 s of it (the maximum, per handover window). The results file keeps every sample.
Run: `.venv/bin/python -m benchmarks.bench_handover --sessions 10000 --rounds 3 [--before DIR]`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import statistics
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.bench_restart import first_pass_done, populate, settle
from benchmarks.common import (
    bench_cluster,
    checkout_pythonpath,
    load_average,
    start_operator,
    stop_on_sigterm,
    stop_operator,
)
from benchmarks.populate import list_sessions
from benchmarks.results import Record
from benchmarks.watches import ExpiredWatch
from devcluster import errors
from devcluster.cluster import Cluster, Paths

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)

from kubernetes import client

NS = "bench-handover"  # its own: bench_restart --waiting counts every session of its namespace
GROUP, VERSION = "agentsession.dev", "v1alpha1"
LEASE = "bench-handover"
LEASE_NS = "default"  # the kubeconfig context's namespace: where the replicas keep their Lease
LEAD = 12.0  # seconds from setting the TTLs to the window's start: the leader's passes see them first
TARGET = 5.0  # seconds a deadline may be acted on late


@dataclass
class Replica:
    side: str  # "this" or "before"
    proc: subprocess.Popen[bytes]
    log: Path
    offset: int
    identity: str


class Replicas:
    """The leader and its standby, as a Deployment of 2 in a rolling update: start one, stop one."""

    def __init__(self, cluster: Cluster, before: str | None) -> None:
        self.cluster = cluster
        self.before = before
        self.count = 0
        self.running: list[Replica] = []

    def start(self, side: str) -> Replica:
        self.count += 1
        identity = f"bench-handover-{side}-{self.count}"
        env = dict(os.environ, POD_NAME=identity, LEASE_NAME=LEASE, LEASE_NAMESPACE=LEASE_NS)
        if side == "before":
            assert self.before
            env["PYTHONPATH"] = checkout_pythonpath(self.before) + os.pathsep + env.get("PYTHONPATH", "")
        path = self.cluster.paths.logs / f"operator-handover-{self.count}.log"
        with open(path, "ab") as log:
            offset = log.tell()
            started = time.monotonic()
            proc = start_operator("--log-level", "INFO", "--namespace", NS, stdout=log, env=env)
        replica = Replica(side, proc, path, offset, identity + "_")  # the Lease holder: POD_NAME_<random>
        self.running.append(replica)
        # Settled: started (its listing done) and idle; the first one leads at once, so its take-over too.
        settle(proc, started, path, offset, first_pass=len(self.running) == 1)
        return replica

    def stop(self, replica: Replica) -> None:
        self.running.remove(replica)
        stop_operator(replica.proc)

    def stop_all(self) -> None:
        for replica in list(self.running):
            self.stop(replica)


def holder(leases: client.CoordinationV1Api) -> str:
    try:
        return str(leases.read_namespaced_lease(LEASE, LEASE_NS).spec.holder_identity or "")
    except client.ApiException:
        return ""


def set_deadlines(
    api: client.CustomObjectsApi, sample: list[dict[str, Any]], start: dt.datetime, window: float
) -> dict[str, dt.datetime]:
    """A TTL for each sampled session, its deadlines spread over [start, start + window]: the deadlines."""

    def one(item: tuple[int, dict[str, Any]]) -> tuple[str, dt.datetime]:
        index, session = item
        meta = session["metadata"]
        created = dt.datetime.fromisoformat(meta["creationTimestamp"].replace("Z", "+00:00"))
        target = start + dt.timedelta(seconds=window * index / max(1, len(sample) - 1))
        ttl = max(1, round((target - created).total_seconds()))
        api.patch_namespaced_custom_object(
            GROUP, VERSION, NS, "agentsessions", meta["name"], {"spec": {"ttl": f"{ttl}s"}}
        )
        return meta["name"], created + dt.timedelta(seconds=ttl)

    with ThreadPoolExecutor(8) as threads:
        return dict(threads.map(one, enumerate(sample)))


def one_window(
    api: client.CustomObjectsApi,
    leases: client.CoordinationV1Api,
    seen: ExpiredWatch,
    replicas: Replicas,
    kind: str,
    sample: list[dict[str, Any]],
    window: float,
) -> dict[str, Any]:
    """One window of `kind` ("quiet", or "handover to <side>"): lateness of each deadline, and the handover's times."""
    row: dict[str, Any] = {"kind": kind}
    if kind != "quiet":
        side = kind.split()[-1]
        leader = next(r for r in replicas.running if holder(leases).startswith(r.identity))
        for standby in [r for r in replicas.running if r is not leader]:
            replicas.stop(standby)  # exactly one standby, of the side measured
        successor = replicas.start(side)
    start = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=LEAD)
    deadlines = set_deadlines(api, sample, start, window)
    while dt.datetime.now(dt.UTC) < start:
        time.sleep(0.05)
    if kind != "quiet":
        # The rolling update: the leader gets SIGTERM at the first deadline; the others fall during the hand-over
        # (the Lease released and taken, the new leader's passes over every session) and after it.
        stopped = time.monotonic()
        stopper = threading.Thread(target=replicas.stop, args=(leader,))
        stopper.start()
        while not holder(leases).startswith(successor.identity) and time.monotonic() - stopped < 60:
            time.sleep(0.05)
        row["lease_taken_s"] = time.monotonic() - stopped
        stopper.join()
        row["old_leader_exit_s"] = time.monotonic() - stopped
    end = max(deadlines.values()) + dt.timedelta(seconds=60)
    while dt.datetime.now(dt.UTC) < end and not all((NS, name) in seen.expired_at for name in deadlines):
        time.sleep(0.2)
    row["late_s"] = [
        (seen.expired_at[NS, name] - at).total_seconds() if (NS, name) in seen.expired_at else 60.0
        for name, at in deadlines.items()
    ]
    if kind != "quiet":
        done = first_pass_done(successor.log, successor.offset) or {}
        row["passes_s"] = done.get("passes_seconds")
    return row


def _delete(api: client.CustomObjectsApi, name: str) -> None:
    try:
        api.delete_namespaced_custom_object(GROUP, VERSION, NS, "agentsessions", name)
    except client.ApiException as exc:
        if exc.status != 404:
            raise


def main() -> None:
    stop_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each has a window of every kind")
    parser.add_argument("--sample", type=int, default=100, help="sessions whose deadlines fall in each window")
    parser.add_argument("--window", type=float, default=20.0, help="seconds the deadlines of a window spread over")
    parser.add_argument("--before", help="another checkout: a handover to its standby beside one to ours")
    args = parser.parse_args()
    cluster, started_cluster, cfg, api = bench_cluster(16)
    leases = client.CoordinationV1Api(client.ApiClient(cfg))
    populate(cluster, api, args.sessions, waiting=True, namespace=NS)
    kinds = ["quiet", "handover to this"] + (["handover to before"] if args.before else [])
    fresh = [s for s in list_sessions(api, NS) if not (s.get("spec") or {}).get("ttl")]
    needed = args.rounds * len(kinds) * args.sample
    if len(fresh) < needed:
        raise SystemExit(f"{len(fresh)} sessions without a TTL left in {NS}, {needed} needed: raise --sessions")
    random.Random(53).shuffle(fresh)  # spread over the cache's order, which a take-over used to follow
    seen = ExpiredWatch(api, NS)
    seen.start()
    seen.ready.wait(120)
    replicas = Replicas(cluster, args.before)
    record = Record.start("bench_handover", rounds=args.rounds, sessions=args.sessions, sample=args.sample)
    rows: list[dict[str, Any]] = []
    try:
        replicas.start("this")
        for round_ in range(args.rounds):
            for kind in kinds[round_ % len(kinds) :] + kinds[: round_ % len(kinds)]:
                sample, fresh = fresh[: args.sample], fresh[args.sample :]
                row = one_window(api, leases, seen, replicas, kind, sample, args.window)
                rows.append(row)
                late = row["late_s"]
                print(
                    f"{time.strftime('%H:%M:%S')} {kind:<20} late median {statistics.median(late):5.2f} s, max"
                    f" {max(late):5.2f} s; { ({k: v for k, v in row.items() if k.endswith('_s') and k != 'late_s'}) }"
                    f" load {load_average():.1f}",
                    flush=True,
                )
    finally:
        replicas.stop_all()
        seen.stop.set()
        # The sessions given a TTL are Expired now: deleted, so the next run's population tops up with fresh ones.
        used = [name for _, name in seen.expired_at]
        with ThreadPoolExecutor(8) as threads:
            list(threads.map(lambda name: _delete(api, name), used))
        if started_cluster:
            cluster.down()
    print(
        f"\n{args.sessions} sessions, {args.sample} deadlines per window over {args.window:.0f} s; {args.rounds} rounds"
    )
    print(f"{'':<20} {'late p50':>9} {'late max':>9} {'Lease taken':>12} {'passes':>8}  target: max <= {TARGET:.0f} s")
    for kind in kinds:
        mine = [r for r in rows if r["kind"] == kind]
        late = [x for r in mine for x in r["late_s"]]
        worst = statistics.median(max(r["late_s"]) for r in mine)
        for r in mine:
            for x in r["late_s"]:
                record.sample("late, s", kind, x)
            record.sample("late max per window, s", kind, max(r["late_s"]))
            for key in ("lease_taken_s", "passes_s"):
                if r.get(key) is not None:
                    record.sample(key.replace("_s", ", s").replace("_", " "), kind, float(r[key]))
        lease = statistics.median(r["lease_taken_s"] for r in mine) if kind != "quiet" else None
        passes = [r["passes_s"] for r in mine if r.get("passes_s") is not None]
        lease_text = "" if lease is None else f"{lease:.2f}s"
        passes_text = f"{statistics.median(passes):.2f}s" if passes else ""
        print(f"{kind:<20} {statistics.median(late):>8.2f}s {worst:>8.2f}s {lease_text:>12} {passes_text:>8}")
    medians = record.medians()
    ratios = {}
    if "handover to this" in medians.get("late max per window, s", {}):
        ratios["late max per handover window, this, s"] = medians["late max per window, s"]["handover to this"]
    record.finish("s", ratios=ratios)


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
