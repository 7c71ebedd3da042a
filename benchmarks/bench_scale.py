"""One operator replica, thousands of sessions: creation throughput against claims created directly,
side by side, then reap precision, memory, idle CPU and writes per report at each size.

Sessions use a pause-image template (this measures the operator, not runtimes). The points are
cumulative: one operator process and the same sessions from the first point to the last (creating
10,000 from nothing again for each point would take most of the run). Up to each point:

- creation, interleaved: batches of SandboxClaims created directly (the object the SDK creates, in
  their own namespace, which the operator does not watch) and batches of AgentSessions through the
  operator, alternating (claims, sessions, sessions, claims, ...), each batch created by 16 threads
  and waited for until every object in it is Ready. Both sides run under the same load and the same
  number of live objects; the ratio is sessions Ready per second over claims Ready per second, each
  summed over its own batches. Ready is seen on a watch (no listing of thousands of objects).
  `--direct-every 2` creates claims in every other round only (a shorter run; each claim batch still
  runs between two session batches, at the same total number of objects).
- the CPU of every process (kube-apiserver, etcd, the agent-sandbox controller, kwok, the pod runner,
  the scheduler, the operator, this benchmark), sampled from /proc, per side: CPU per object created
  says which component pays for what the operator adds;
- where a session's create -> Ready goes, against a direct claim's: one object in `--trace-every` per
  batch, split at the moment agent-sandbox's controller first sees its claim (the controller's own
  stamp) and the moment the benchmark's watch sees the claim Ready: create -> claim seen by the
  controller, -> claim Ready, -> session Ready. The operator's part is the first and last spans
  beyond a direct claim's;
- idle CPU: nothing happens for a while;
- API writes per activity report: 100 reports on 100 sessions, counted by the API server;
- reap lag: a sample of sessions get a new idleTimeout so their deadlines fall over the next
  `--window` seconds (the others keep hours); deadline -> the claim's DELETED event. Reaped early:
  any claim deleted more than 1 s before its deadline (the others count too: their deadlines are
  hours away).

Prints a table per point and one row per point; writes the rows as JSON (`--json`) for
`benchmarks.plot_scale`.
Run: `.venv/bin/python -m benchmarks.bench_scale [--points 100,1000,5000,10000]`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
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

from benchmarks.bench_restart import fresh_replica
from benchmarks.common import (
    apiserver_requests,
    bench_cluster,
    create_namespace,
    load_average,
    proc_cpu_seconds,
    proc_peak_rss_mib,
    proc_rss_mib,
    start_operator,
    stop_on_sigterm,
    stop_operator,
)
from devcluster import errors
from devcluster.cluster import Cluster, Paths

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from testkit import manifests

NS = "bench-scale"  # the sessions (the only namespace the operator watches)
NS_DIRECT = "bench-scale-direct"  # the claims created directly
GROUP, VERSION = "agentsession.dev", "v1alpha1"
EXT, EXT_VERSION = "extensions.agents.x-k8s.io", "v1beta1"
LONG_IDLE = "8h"  # every session's idle timeout but the reap sample's: never reached in a run
THREADS = 16


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(p) for p in task.read_text().split()]
    return found


def pin_everything(operator: int | None, operator_cpu: int | None) -> None:
    """`--operator-cpu`: the operator's threads on that CPU alone, every other thread of the machine on the
    other CPUs (threads and processes started later inherit their parent's); both None: every thread on
    every CPU again. Kernel threads bound to a CPU refuse, and are left as they are."""
    every = set(range(os.cpu_count() or 1))
    own = {operator_cpu} if operator_cpu is not None else every
    rest = every - own or every
    for task in Path("/proc").glob("[0-9]*/task/[0-9]*"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(task.name), own if int(task.parent.parent.name) == operator else rest)


def ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# agent-sandbox's controller stamps each claim when it first sees it (RFC 3339 with nanoseconds, its clock:
# this machine's). With the moments the benchmark's watches see the claim and the session Ready, it splits
# a session's create -> Ready into the operator's part and the claim's, the same for a direct claim. (Its
# claim-first-ready-at stamp is "unknown" for most claims under load: not usable.)
OBSERVED = "agents.x-k8s.io/controller-first-observed-at"
SPANS = ("to_claim", "claim", "after_ready")
"""create -> the controller sees the claim; -> the claim is seen Ready; -> the session is seen Ready (0 direct)."""


def epoch(stamp: str) -> float | None:
    """Epoch seconds of an RFC 3339 UTC time with up to nine fraction digits (Python parses six); None
    for anything else (the controller writes "unknown" when it missed the moment)."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    try:
        return dt.datetime.fromisoformat(whole).replace(tzinfo=dt.UTC).timestamp() + float(f"0.{fraction or 0}")
    except ValueError:
        return None


def claim_spans(claim: dict[str, Any], created: float, claim_ready: float, ready: float) -> dict[str, float] | None:
    """The three SPANS of one object (epoch seconds in; `ready` is the session's, or the claim's again for a
    direct claim); None when the controller left no stamp."""
    observed = epoch(((claim.get("metadata") or {}).get("annotations") or {}).get(OBSERVED, ""))
    if observed is None:
        return None
    return {"to_claim": observed - created, "claim": claim_ready - observed, "after_ready": ready - claim_ready}


_READS = ("GET", "LIST", "WATCH", "CONNECT")


def apiserver_write_counts(cluster: Cluster) -> dict[str, float]:
    """Write requests the API server has served (any response code), by "resource[/subresource] VERB"."""
    counts: dict[str, float] = {}
    for (verb, resource, sub), value in apiserver_requests(cluster).items():
        if verb not in _READS and resource:
            key = f"{resource}{'/' + sub if sub else ''} {verb}"
            counts[key] = counts.get(key, 0.0) + value
    return counts


def apiserver_writes(cluster: Cluster) -> float:
    """PATCH and UPDATE requests the API server served for agentsessions (any subresource)."""
    return sum(
        value
        for (verb, resource, _), value in apiserver_requests(cluster).items()
        if resource == "agentsessions" and verb in ("PATCH", "UPDATE")
    )


class CpuSampler(threading.Thread):
    """CPU seconds of each process, summed per phase (the phase the main thread says it is in)."""

    def __init__(self, pids: dict[str, int], period: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.period = period
        self.phase = "setup"
        self.totals: dict[str, dict[str, float]] = {}
        self.wall: dict[str, float] = {}
        self.loads: list[float] = []
        self.stop = threading.Event()

    def _sample(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, pid in self.pids.items():
            try:
                # bwrap (the agent-sandbox controller's) does nothing itself: count its children too. Not
                # for this benchmark: the operator is its child, counted on its own.
                children = _children(pid) if name == "agent-sandbox-controller" else []
                out[name] = proc_cpu_seconds(pid) + sum(proc_cpu_seconds(c) for c in children)
            except (FileNotFoundError, ProcessLookupError, ValueError):
                out[name] = 0.0
        return out

    def run(self) -> None:
        last, last_t = self._sample(), time.monotonic()
        while not self.stop.wait(self.period):
            now, now_t = self._sample(), time.monotonic()
            phase = self.phase
            table = self.totals.setdefault(phase, {})
            for name, value in now.items():
                table[name] = table.get(name, 0.0) + max(0.0, value - last.get(name, value))
            self.wall[phase] = self.wall.get(phase, 0.0) + now_t - last_t
            self.loads.append(load_average())
            last, last_t = now, now_t

    def snapshot(self) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
        return {k: dict(v) for k, v in self.totals.items()}, dict(self.wall)


class Tracker(threading.Thread):
    """Watches one kind in one namespace: when each object was first seen Ready, when it was deleted."""

    def __init__(
        self,
        api: client.CustomObjectsApi,
        group: str,
        version: str,
        namespace: str,
        plural: str,
        ready: Callable[..., bool],
        ended: Callable[..., bool] = lambda _: False,
        always: bool = True,
        key: Callable[[dict[str, Any]], str | None] = lambda obj: str(obj["metadata"]["name"]),
    ) -> None:
        super().__init__(daemon=True)
        self.key = key  # what an object's times are kept under (None: not tracked)
        self.args = (group, version, namespace, plural)
        self.api = api
        self.is_ready = ready
        self.is_ended = ended
        self.ready_at: dict[str, float] = {}  # monotonic
        self.ready_wall: dict[str, float] = {}  # the same moment in epoch seconds (the controller stamps those)
        self.ended_at: dict[str, dt.datetime] = {}
        self.deleted_at: dict[str, dt.datetime] = {}
        self.changed = threading.Condition()
        self.stop = threading.Event()
        self.started = threading.Event()
        # A tracker that is not `always` watches only while active (from the moment it is activated): the
        # sessions' claims when not tracing (their events are most of what this process would decode).
        self.always = always
        self.active = threading.Event()
        if always:
            self.active.set()

    def activate(self, on: bool) -> None:
        if on:
            self.started.clear()
            self.active.set()
            self.started.wait(60)
        else:
            self.active.clear()

    def _see(self, kind: str, obj: dict[str, Any]) -> None:
        name = self.key(obj)
        if name is None:
            return
        with self.changed:
            if kind == "DELETED":
                self.deleted_at.setdefault(name, dt.datetime.now(dt.UTC))
            elif name not in self.ready_at and self.is_ready(obj):
                self.ready_at[name] = time.monotonic()
                self.ready_wall[name] = time.time()
            elif name not in self.ended_at and self.is_ended(obj):
                self.ended_at[name] = dt.datetime.now(dt.UTC)
            else:
                return
            self.changed.notify_all()

    def run(self) -> None:
        version = ""
        while not self.stop.is_set():
            if not self.active.is_set():
                version = ""
                self.active.wait(1.0)
                continue
            try:
                if not version:
                    if self.always:
                        listing = self.api.list_namespaced_custom_object(*self.args)
                        for item in listing["items"]:
                            self._see("LISTED", item)
                    else:  # from now on: the list's version only
                        listing = self.api.list_namespaced_custom_object(*self.args, limit=1)
                    version = listing["metadata"]["resourceVersion"]
                    self.started.set()
                for event in watch.Watch().stream(
                    self.api.list_namespaced_custom_object,
                    *self.args,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=60,
                ):
                    version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self._see(event["type"], event["object"])
                    if self.stop.is_set() or not self.active.is_set():
                        break
            except ApiException as exc:
                if exc.status == 410:
                    version = ""  # too old: list again
                else:
                    time.sleep(0.5)
            except Exception:
                time.sleep(0.5)

    def wait_ready(self, names: list[str], timeout: float = 1800) -> float:
        """The monotonic time the last of `names` was seen Ready."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                missing = [n for n in names if n not in self.ready_at]
                if not missing:
                    return max(self.ready_at[n] for n in names)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(missing)}/{len(names)} not Ready after {timeout:.0f} s: {missing[:5]}")
                self.changed.wait(1.0)


def claim_ready(claim: dict[str, Any]) -> bool:
    conditions = (claim.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _session_ready(session: dict[str, Any]) -> bool:
    return bool((session.get("status") or {}).get("readyAt"))  # Ready at least once


def _session_expired(session: dict[str, Any]) -> bool:
    return (session.get("status") or {}).get("phase") == "Expired"


class Run:
    """The cluster, the two trackers, the operator and the running totals of both sides."""

    def __init__(self, cluster: Cluster, api: client.CustomObjectsApi, args: argparse.Namespace) -> None:
        self.cluster, self.api, self.args = cluster, api, args
        self.sessions = Tracker(api, GROUP, VERSION, NS, "agentsessions", _session_ready, _session_expired)
        # The sessions' claims: all along when tracing; else only while a sample is being reaped (a session
        # reaped at any other time shows as Expired on the sessions' watch).
        tracing = args.trace_every > 0
        self.claims = Tracker(api, EXT, EXT_VERSION, NS, "sandboxclaims", claim_ready, always=tracing)
        self.direct = Tracker(api, EXT, EXT_VERSION, NS_DIRECT, "sandboxclaims", claim_ready)
        self.count = 0  # sessions created so far
        self.made = {"sessions": 0, "direct": 0}
        self.rounds = 0
        self.direct_rounds = 0
        self.busy = {"sessions": 0.0, "direct": 0.0}  # seconds spent in each side's batches
        self.latencies: dict[str, list[float]] = {"sessions": [], "direct": []}
        # API write requests while each side's batches ran (a batch ends when its last object is Ready:
        # the few writes after that, a pod's last status, count for the next batch).
        self.writes: dict[str, dict[str, float]] = {"sessions": {}, "direct": {}}
        self.created_at: dict[str, float] = {}
        self.created_wall: dict[str, float] = {}
        # Per side, SPANS of a sample of each batch (one in `--trace-every`), read after the batch.
        self.spans: dict[str, list[dict[str, float]]] = {"sessions": [], "direct": []}
        self.sampled: set[str] = set()  # sessions given a short idle timeout, at any point
        self.operator: Any = None
        self.sampler: CpuSampler | None = None

    def setup(self) -> None:
        for ns in (NS, NS_DIRECT):
            create_namespace(self.cluster, ns)
            docs = [manifests.template("pause"), manifests.warm_pool("pool", "pause", 0)]
            self.cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(docs))
        log = open(self.cluster.paths.logs / "operator-bench.log", "wb")  # noqa: SIM115 - the run's lifetime
        self.operator = start_operator("--log-level", "WARNING", "--namespace", NS, stdout=log)
        for tracker in (self.sessions, self.claims, self.direct):
            tracker.start()
            if tracker.always:
                tracker.started.wait(60)
        self.pin(self.operator.pid)
        pids = {k: int(v) for k, v in self.cluster.state.get("pids", {}).items()}
        pids["operator"] = self.operator.pid
        pids["benchmark"] = os.getpid()
        self.sampler = CpuSampler(pids)
        self.sampler.start()
        time.sleep(3)  # the operator's start-up listing

    def restart_operator(self) -> dict[str, Any]:
        """A restart (or a failover) at this point: the operator stopped, a fresh replica started on the
        namespace as it is, measured until it settles (benchmarks.bench_restart); it goes on as the run's."""
        assert self.sampler is not None
        self.sampler.phase = "restart"
        stop_operator(self.operator)
        self.operator, measured = fresh_replica(
            self.cluster, NS, "operator-bench.log", on_start=self.pin, wait_started=True, first_pass=True
        )
        self.sampler.pids["operator"] = self.operator.pid
        return measured

    def pin(self, operator: int) -> None:
        """With `--operator-cpu` only: without it no thread's CPUs are touched."""
        if self.args.operator_cpu is not None:
            pin_everything(operator, self.args.operator_cpu)

    def close(self) -> None:
        for tracker in (self.sessions, self.claims, self.direct):
            tracker.stop.set()
        if self.sampler is not None:
            self.sampler.stop.set()
        if self.operator is not None:
            stop_operator(self.operator)
        if self.args.operator_cpu is not None:
            pin_everything(None, None)

    def _batch(self, side: str, size: int) -> float:
        """Create `size` objects of one side and wait until all are Ready; their rate."""
        assert self.sampler is not None
        self.sampler.phase = side
        first = self.made[side]
        names = [f"{'s' if side == 'sessions' else 'd'}{i:05d}" for i in range(first, first + size)]

        def create(name: str) -> None:
            self.created_at[name] = time.monotonic()
            self.created_wall[name] = time.time()
            if side == "sessions":
                body = manifests.session(name, "pool", idleTimeout=LONG_IDLE)
                self.api.create_namespaced_custom_object(GROUP, VERSION, NS, "agentsessions", body)
            else:
                body = manifests.claim(name, "pool")
                self.api.create_namespaced_custom_object(EXT, EXT_VERSION, NS_DIRECT, "sandboxclaims", body)

        writes0 = apiserver_write_counts(self.cluster)
        t0 = time.monotonic()
        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(create, names))
        tracker = self.sessions if side == "sessions" else self.direct
        done = tracker.wait_ready(names)
        for key, value in apiserver_write_counts(self.cluster).items():
            self.writes[side][key] = self.writes[side].get(key, 0.0) + value - writes0.get(key, 0.0)
        self.busy[side] += done - t0
        self.made[side] += size
        self.latencies[side] += [tracker.ready_at[n] - self.created_at[n] for n in names]
        self.sampler.phase = "between"
        if self.args.trace_every > 0:
            self._trace(side, names[:: self.args.trace_every])
        return size / (done - t0)

    def _trace(self, side: str, names: list[str]) -> None:
        """SPANS of these objects: their claims read once (a session's claim has its name: short names)."""
        namespace, claims = (NS, self.claims) if side == "sessions" else (NS_DIRECT, self.direct)
        ready = self.sessions if side == "sessions" else self.direct
        for name in names:
            if name not in claims.ready_wall:  # Ready before the watch saw it (a session's claim, rarely)
                continue
            claim = self.api.get_namespaced_custom_object(EXT, EXT_VERSION, namespace, "sandboxclaims", name)
            spans = claim_spans(claim, self.created_wall[name], claims.ready_wall[name], ready.ready_wall[name])
            if spans is not None:
                self.spans[side].append(spans)

    def grow_to(self, n: int) -> dict[str, Any]:
        """Create both sides up to n each, in alternating batches; what each side cost."""
        assert self.sampler is not None
        busy0, made0 = dict(self.busy), dict(self.made)
        writes0 = {side: dict(w) for side, w in self.writes.items()}
        lat0 = {k: len(v) for k, v in self.latencies.items()}
        spans0 = {k: len(v) for k, v in self.spans.items()}
        cpu0, wall0 = self.sampler.snapshot()
        size = max(25, min(self.args.batch, (n - self.count) // 4))
        while self.count < n:
            step = min(size, n - self.count)
            rates: dict[str, float] = {}
            order: tuple[str, ...]
            if self.rounds % self.args.direct_every == 0 or self.made["direct"] == made0["direct"]:
                # claims, sessions, then sessions, claims: neither side always goes first.
                order = ("direct", "sessions") if self.direct_rounds % 2 == 0 else ("sessions", "direct")
                self.direct_rounds += 1
            else:
                order = ("sessions",)
            for side in order:
                rates[side] = self._batch(side, step)
            self.count += step
            self.rounds += 1
            said = ", ".join(f"{k} {v:.1f}/s" for k, v in rates.items())
            print(
                f"{dt.datetime.now(dt.UTC):%H:%M:%S} {self.made['sessions']} sessions, {self.made['direct']} claims;"
                f" batch of {step}: {said}; operator RSS {proc_rss_mib(self.operator.pid):.0f} MiB;"
                f" load {load_average():.1f}",
                flush=True,
            )
        cpu1, wall1 = self.sampler.snapshot()
        per_side: dict[str, Any] = {}
        for side in ("direct", "sessions"):
            created = self.made[side] - made0[side]
            seconds = self.busy[side] - busy0[side]
            cpu = {k: v - cpu0.get(side, {}).get(k, 0.0) for k, v in cpu1.get(side, {}).items()}
            wall = wall1.get(side, 0.0) - wall0.get(side, 0.0)
            lat = self.latencies[side][lat0[side] :]
            traced = self.spans[side][spans0[side] :]
            per_side[side] = {
                "created": created,
                "seconds": seconds,
                "rate": created / seconds,
                "latency_p50": statistics.median(lat),
                "latency_p99": percentile(lat, 0.99),
                "traced": len(traced),
                **{
                    f"{span}_{q}": percentile([t[span] for t in traced], p) if traced else float("nan")
                    for span in SPANS
                    for q, p in (("p50", 0.5), ("p99", 0.99))
                },
                "cpu_ms_per_object": {k: 1000 * v / created for k, v in cpu.items()},
                "cpu_pct": {k: 100 * v / wall for k, v in cpu.items()} if wall else {},
                "writes_per_object": {
                    k: (v - writes0[side].get(k, 0.0)) / created
                    for k, v in self.writes[side].items()
                    if v - writes0[side].get(k, 0.0) > 0
                },
            }
        return {"created": self.made["sessions"] - made0["sessions"], "batch": size, **per_side}


def main() -> None:
    stop_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", default="100,1000,5000", help="numbers of live sessions, cumulative")
    parser.add_argument("--batch", type=int, default=250, help="largest batch of each side")
    parser.add_argument("--window", type=float, default=30.0, help="the reap sample's deadlines spread over this")
    parser.add_argument("--sample", type=int, default=100, help="sessions reaped at each point")
    parser.add_argument("--quiet", type=float, default=30.0, help="seconds of idle CPU measurement")
    parser.add_argument(
        "--direct-every",
        type=int,
        default=1,
        help="a batch of direct claims every this many rounds (2: half as many claims as sessions, a shorter run)",
    )
    parser.add_argument("--json", default="", help="write the per-point rows here")
    parser.add_argument(
        "--trace-every",
        type=int,
        default=10,
        help="split create -> Ready of one object in this many per batch (0: no tracing, no claim watch)",
    )
    parser.add_argument(
        "--operator-cpu",
        type=int,
        default=None,
        help="run the operator alone on this CPU and every other process on the others (as on a node of its own"
        " beside the control plane); restored at the end",
    )
    args = parser.parse_args()
    cpus = os.cpu_count() or 1
    if args.operator_cpu is not None and (cpus < 2 or not 0 <= args.operator_cpu < cpus):
        parser.error(f"--operator-cpu needs two CPUs or more and one of them: this machine has CPUs 0 to {cpus - 1}")
    points = sorted(int(p) for p in args.points.split(","))
    cluster, started_cluster, _, api = bench_cluster()
    for ns in (NS, NS_DIRECT):
        _wait_namespace_gone(cluster, ns)
    results: list[dict[str, Any]] = []
    run = Run(cluster, api, args)
    try:
        run.setup()
        for n in points:
            results.append(run_point(run, n))
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    finally:
        run.close()
        if started_cluster:
            cluster.down()
    print("\nHow cost grows (one operator replica; creation: sessions Ready per second vs claims created directly)")
    print(
        f"{'sessions':>8} {'RSS MiB':>8} {'reap p50 s':>10} {'reap p99 s':>10} {'early':>5} {'idle CPU %':>10} "
        f"{'writes/rep':>10} {'sessions/s':>10} {'claims/s':>8} {'ratio':>6} {'restart s':>9} {'restart MiB':>11}"
        f" {'op. s':>6} {'load':>9}"
    )
    for r in results:
        print(
            f"{r['sessions']:>8} {r['rss_mib']:>8.0f} {r['reap_p50']:>10.2f} {r['reap_p99']:>10.2f} {r['early']:>5} "
            f"{r['idle_cpu_pct']:>10.2f} {r['writes_per_report']:>10.2f} {r['session_rate']:>10.1f} "
            f"{r['claim_rate']:>8.1f} {r['session_rate'] / r['claim_rate']:>6.2f} "
            f"{r['fresh']['settled_s']:>9.1f} {r['fresh']['peak_mib']:>11.0f} "
            f"{operator_part(r['growth']['sessions'], r['growth']['direct']):>6.2f} "
            f"{r['load_min']:>4.1f}-{r['load_max']:<4.1f}"
        )
    print("targets: reap p99 <= 1 s, 0 early, RSS <= 400 MiB, idle CPU < 2 %, writes/report 2, ratio >= 0.9")
    print("op. s: the operator's own part of a session's create -> Ready p50 (beyond a direct claim's path)")


def _wait_namespace_gone(cluster: Cluster, ns: str) -> None:
    # kubectl's own --wait outlasts Cluster.kubectl's timeout with thousands of objects: poll instead.
    cluster.kubectl("delete", "namespace", ns, "--ignore-not-found", "--wait=false")
    deadline = time.monotonic() + 1200
    while cluster.kubectl("get", "namespace", ns, "--ignore-not-found", "-o", "name").stdout.strip():
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {ns} still there after 20 min")
        time.sleep(2)


def _idle_deadline(session: dict[str, Any], idle_seconds: float) -> dt.datetime:
    status = session.get("status") or {}
    last = ts(status.get("lastActivityTime") or status["readyAt"])
    return last + dt.timedelta(seconds=idle_seconds)


def print_writes(direct: dict[str, float], sessions: dict[str, float]) -> None:
    """API write requests per object created, by resource and verb, per side (what a session adds)."""
    print("API write requests per object created, while each side's batches ran:")
    keys = sorted(set(direct) | set(sessions), key=lambda k: -max(direct.get(k, 0.0), sessions.get(k, 0.0)))
    for key in keys:
        d, s = direct.get(key, 0.0), sessions.get(key, 0.0)
        if max(d, s) >= 0.01:
            print(f"  {key:<34} claim {d:6.2f}   session {s:6.2f}")
    print(f"  {'all':<34} claim {sum(direct.values()):6.2f}   session {sum(sessions.values()):6.2f}")


def operator_part(sessions: dict[str, Any], direct: dict[str, Any]) -> float:
    """Seconds of a session's create -> Ready p50 that a direct claim does not spend outside the claim path."""
    return float(sum(sessions[f"{s}_p50"] - direct[f"{s}_p50"] for s in ("to_claim", "after_ready")))


def _span_rows(sessions: dict[str, Any], direct: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """create -> Ready split at the controller's stamps, p50 (p99), session / claim; the operator's part is
    the difference of the first and last spans (a direct claim has nothing between)."""
    names = {
        "to_claim": "create -> controller sees claim",
        "claim": "controller sees claim -> Ready",
        "after_ready": "claim Ready -> Ready seen",
    }
    rows: list[tuple[str, Any, str]] = []
    for span, label in names.items():
        s50, s99, d50, d99 = (side[f"{span}_{q}"] for side in (sessions, direct) for q in ("p50", "p99"))
        rows.append((label, f"{s50:.2f} ({s99:.2f}) / {d50:.2f} ({d99:.2f}) s", ""))
    own = operator_part(sessions, direct)
    traced = f"({sessions['traced']} sessions, {direct['traced']} claims traced)"
    rows.append(("the operator's part of create -> Ready p50", f"{own:.2f} s", traced))
    return rows


def run_point(run: Run, n: int) -> dict[str, Any]:
    api, cluster, args = run.api, run.cluster, run.args
    assert run.sampler is not None
    loads0 = len(run.sampler.loads)
    growth = run.grow_to(n)
    sessions, direct = growth["sessions"], growth["direct"]
    operator = run.operator

    # Idle CPU: nothing happens to these sessions for a while.
    run.sampler.phase = "idle"
    time.sleep(2)  # the last batch's own status writes settle
    cpu0, w0 = proc_cpu_seconds(operator.pid), time.monotonic()
    time.sleep(args.quiet)
    idle_cpu = (proc_cpu_seconds(operator.pid) - cpu0) / (time.monotonic() - w0)

    # API writes per activity report: 100 reports on 100 sessions, counted by the API server.
    run.sampler.phase = "reports"
    live = sorted(set(run.sessions.ready_at) - set(run.claims.deleted_at))
    reporters = live[: min(100, max(1, n // 10))]
    before = apiserver_writes(cluster)
    for name in reporters:
        stamp = dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")
        patch = {"metadata": {"annotations": {"agentsession.dev/activity": f"{stamp} busy=0"}}}
        api.patch_namespaced_custom_object(GROUP, VERSION, NS, "agentsessions", name, patch)
    time.sleep(5)
    writes_per_report = (apiserver_writes(cluster) - before) / len(reporters)

    # Reap lag: a sample (not the reporters) gets deadlines spread over the next `window` seconds.
    run.sampler.phase = "reaping"
    if not run.claims.always:
        run.claims.activate(True)
    pool = [s for s in live if s not in set(reporters)]
    sample = pool[:: max(1, len(pool) // args.sample)][: args.sample]
    start = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=15)  # the patches below take a few seconds
    deadlines: dict[str, dt.datetime] = {}

    def shorten(item: tuple[int, str]) -> None:
        i, name = item
        body = api.get_namespaced_custom_object(GROUP, VERSION, NS, "agentsessions", name)
        target = start + dt.timedelta(seconds=args.window * i / max(len(sample) - 1, 1))
        since = _idle_deadline(body, 0)
        idle = max(1, round((target - since).total_seconds()))
        api.patch_namespaced_custom_object(
            GROUP, VERSION, NS, "agentsessions", name, {"spec": {"idleTimeout": f"{idle}s"}}
        )
        deadlines[name] = since + dt.timedelta(seconds=idle)  # claim name == session name (short names)

    with ThreadPoolExecutor(8) as threads:
        list(threads.map(shorten, enumerate(sample)))
    end = max(deadlines.values()) + dt.timedelta(seconds=30)
    while dt.datetime.now(dt.UTC) < end and not all(s in run.claims.deleted_at for s in sample):
        time.sleep(1)
    lags = [(run.claims.deleted_at[s] - d).total_seconds() for s, d in deadlines.items() if s in run.claims.deleted_at]
    if not run.claims.always:
        run.claims.activate(False)
    run.sampled |= set(deadlines)
    others = (set(run.claims.deleted_at) | set(run.sessions.ended_at)) - run.sampled
    early = sum(lag < -1.0 for lag in lags) + len(others)  # every other deadline is hours away
    peak = proc_peak_rss_mib(operator.pid)
    fresh = run.restart_operator()  # last: the next point goes on with this replica
    run.sampler.phase = "between"
    loads = run.sampler.loads[loads0:] or [load_average()]
    ratio = sessions["rate"] / direct["rate"]
    rows: list[tuple[str, Any, str]] = [
        (
            "live sessions",
            n,
            f"(+{growth['created']} sessions, +{direct['created']} direct claims, batches of {growth['batch']})",
        ),
        ("sessions Ready/s (through the operator)", f"{sessions['rate']:.1f}", f"{sessions['seconds']:.0f} s"),
        ("claims Ready/s (created directly)", f"{direct['rate']:.1f}", f"{direct['seconds']:.0f} s"),
        ("creation throughput ratio", f"{ratio:.2f}", ">= 0.9"),
        ("create -> Ready p50 session / claim", f"{sessions['latency_p50']:.2f} / {direct['latency_p50']:.2f} s", ""),
        ("create -> Ready p99 session / claim", f"{sessions['latency_p99']:.2f} / {direct['latency_p99']:.2f} s", ""),
        *_span_rows(sessions, direct),
        ("operator CPU while idle", f"{100 * idle_cpu:.2f} % of a core", f"< 2 % (over {args.quiet:.0f} s)"),
        ("API writes per activity report", f"{writes_per_report:.2f}", "2 (1 = the client's own patch)"),
        ("reaped / sample", f"{len(lags)} / {len(sample)}", f"(deadlines over {args.window:.0f} s)"),
        ("reap lag p50", f"{statistics.median(lags):.2f} s" if lags else "n/a", ""),
        ("reap lag p99", f"{percentile(lags, 0.99):.2f} s" if lags else "n/a", "<= 1 s"),
        ("reaped before the deadline", early, "0"),
        ("operator peak RSS", f"{peak:.0f} MiB", "<= 400 MiB"),
        ("fresh replica: first pass done", f"{fresh['first_pass_s']:.1f} s", "(since its process started)"),
        ("fresh replica: settled after", f"{fresh['settled_s']:.1f} s", f"(CPU {fresh['cpu_s']:.1f} s)"),
        ("fresh replica: peak RSS", f"{fresh['peak_mib']:.0f} MiB", f"(settled {fresh['settled_mib']:.0f} MiB)"),
        (
            "fresh replica: API requests",
            f"{fresh['gets']:.0f} GET, {fresh['lists']:.0f} LIST",
            f"{fresh['writes']:.0f} writes",
        ),
        ("load average (1 min) during the point", f"{min(loads):.1f} to {max(loads):.1f}", "(2 cores)"),
        ("operator's CPU", "shared" if args.operator_cpu is None else f"CPU {args.operator_cpu} alone", ""),
    ]
    for name, value, target in rows:
        print(f"{name:<40} {value!s:>22}  {target}")
    print("CPU per object created (ms) and share of a core while creating, per side:")
    for proc in sorted(sessions["cpu_ms_per_object"], key=lambda p: -sessions["cpu_ms_per_object"][p]):
        d_ms, s_ms = direct["cpu_ms_per_object"].get(proc, 0.0), sessions["cpu_ms_per_object"][proc]
        d_pct, s_pct = direct["cpu_pct"].get(proc, 0.0), sessions["cpu_pct"].get(proc, 0.0)
        print(f"  {proc:<26} claim {d_ms:7.1f} ms {d_pct:5.0f} %   session {s_ms:7.1f} ms {s_pct:5.0f} %")
    print_writes(direct["writes_per_object"], sessions["writes_per_object"])
    return {
        "sessions": n,
        "rss_mib": peak,
        "reap_p50": statistics.median(lags) if lags else float("nan"),
        "reap_p99": percentile(lags, 0.99) if lags else float("nan"),
        "early": early,
        "reaped": len(lags),
        "measured": len(sample),
        "idle_cpu_pct": 100 * idle_cpu,
        "writes_per_report": writes_per_report,
        "session_rate": sessions["rate"],
        "claim_rate": direct["rate"],
        "ratio": ratio,
        "fresh": fresh,
        "load_min": min(loads),
        "load_max": max(loads),
        "growth": growth,
        "operator_cpu": args.operator_cpu,
    }


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
