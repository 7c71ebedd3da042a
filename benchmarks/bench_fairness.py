"""Fairness: tenant B's AgentSession create -> Ready while tenant A churns (issue 28 item 11, issue 32).

Three conditions, rounds interleaved (the order rotates every round), each measuring tenant B's session
create -> Ready (this process's clock, a watch on the session) on a cold pool of pause pods:
- quiet: nothing else happens;
- activity: tenant A floods activity annotations on its 20 sessions (threads patching as fast as the API
  server answers), as a hostile or buggy client may;
- burst: tenant A creates 1,000 sessions at once (8 threads); they wait on a pool that does not exist, so
  they cost the operator passes and status writes but agent-sandbox and the node nothing: what B meets is
  the operator's own queueing.
Between two conditions the bench waits until the machine is idle again (under 25 % busy for 3 s): what
one condition queued at the API server is not measured in the next. Prints the medians, each condition's
ratio to quiet (target <= 1.10) and how many of A's writes the operator saw, then B's time split by step
and by who holds it (benchmarks.timeline: the operator, agent-sandbox, the node). `--checkout DIR` runs
another checkout's operator (e.g. the code before a change), so before and after are measured alike.

Run: `.venv/bin/python -m benchmarks.bench_fairness [--rounds 5 --samples 3]` (uses the running local
control plane or starts one; DEVCLUSTER_NODE=kwok is enough).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import yaml

from agentsession_api import names
from agentsession_api.activity import format_activity
from benchmarks.common import (
    bench_cluster,
    checkout_pythonpath,
    create_namespace,
    create_until_ready,
    load_average,
    start_operator,
    stop_operator,
    wait_machine_idle,
)
from devcluster import errors
from devcluster.cluster import Cluster, Paths

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)  # before the kubernetes client is imported (timeline too)

from kubernetes import client

from benchmarks.results import Record
from benchmarks.timeline import OWNERS, STEPS, Timeline, print_split
from testkit import manifests

NS_A, NS_BURST, NS_B = "fair-a", "fair-a-burst", "fair-b"  # a burst namespace per round: fair-a-burst-<round>
GROUP, VERSION, PLURAL = names.GROUP, names.VERSION, names.SESSION_PLURAL
FLOODED = 20  # tenant A's sessions whose activity annotation is flooded
BURST = 1000  # tenant A's creates in one burst
CONDITIONS = ("quiet", "activity", "burst")


SPLITS: dict[str, dict[str, float]] = {}  # B's samples' steps (benchmarks.timeline), by session name
TIMEOUT = 120.0  # seconds a sample of B waits; one that times out counts as this (a lower bound)


def session_to_ready(
    api: client.CustomObjectsApi, name: str, timeout: float = TIMEOUT, timeline: Timeline | None = None
) -> float:
    """Seconds from B's create to its Ready (TIMEOUT if not Ready by then: counted, and said in the table).
    With a `timeline`, its split by step goes to `timeline.splits[name]`."""
    seen = create_until_ready(api, NS_B, manifests.session(name, "pool"), timeout)
    if seen is None:
        return timeout
    started, ready = seen
    if timeline is not None:
        split = timeline.split(name, started, ready)
        if split is not None:
            SPLITS[name] = split
    return ready - started


class Flood(threading.Thread):
    """Patches the activity annotation of A's sessions, round and round, until stopped."""

    def __init__(self, api: client.CustomObjectsApi, sessions: list[str], stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.api, self.sessions, self.stop = api, sessions, stop
        self.writes = 0

    def run(self) -> None:
        while not self.stop.is_set():
            for name in self.sessions:
                if self.stop.is_set():
                    return
                body = {
                    "metadata": {"annotations": {names.ANNOTATION_ACTIVITY: format_activity(dt.datetime.now(dt.UTC))}}
                }
                self.api.patch_namespaced_custom_object(GROUP, VERSION, NS_A, PLURAL, name, body)
                self.writes += 1


def burst_namespace(round_: int) -> str:
    return f"{NS_BURST}-{round_}"


def burst(api: client.CustomObjectsApi, round_: int, started: threading.Event) -> Callable[[], None]:
    """Starts A's 1,000 creates in the background; `started` is set after the first 50. Returns a join."""
    pool = ThreadPoolExecutor(max_workers=8)
    count = [0]
    lock = threading.Lock()

    def create(i: int) -> None:
        api.create_namespaced_custom_object(
            GROUP, VERSION, burst_namespace(round_), PLURAL, manifests.session(f"b{round_}-{i}", "nopool")
        )
        with lock:
            count[0] += 1
            if count[0] >= 50:
                started.set()

    futures = [pool.submit(create, i) for i in range(BURST)]

    def join() -> None:
        for future in futures:
            future.result()
        pool.shutdown()

    return join


def delete_all(api: client.CustomObjectsApi, namespace: str, timeout: float = 300) -> None:
    """Delete every session of `namespace` (one deletecollection: kubectl deletes one by one) and wait
    (bounded) until none is left."""
    try:
        api.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    except client.ApiException as exc:
        if exc.status != 504:  # a loaded API server gives up answering; the deletion goes on: waited for below
            raise
    deadline = time.monotonic() + timeout
    while api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, limit=1)["items"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"sessions of {namespace} not deleted within {timeout} s")
        time.sleep(0.5)


def tenant_api(cluster: Cluster, admin: client.Configuration) -> client.CustomObjectsApi:
    """Tenant A's own client (`--tenant-a-user`): a ServiceAccount allowed to create and patch sessions, so
    its requests meet the API server's Priority and Fairness as a tenant's do (the admin's are exempt)."""
    rbac = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant-a", "namespace": NS_A}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "bench-fair-tenant-a"},
            "rules": [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["create", "patch", "get", "list"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "bench-fair-tenant-a"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "bench-fair-tenant-a"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant-a", "namespace": NS_A}],
        },
    ]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    token = cluster.kubectl("create", "token", "tenant-a", "-n", NS_A, "--duration=2h").stdout.strip()
    tenant = client.Configuration.get_default_copy()
    tenant.cert_file = tenant.key_file = None
    tenant.api_key = {"authorization": f"Bearer {token}"}
    tenant.connection_pool_maxsize = admin.connection_pool_maxsize
    return client.CustomObjectsApi(client.ApiClient(tenant))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=3, help="tenant B's sessions per condition per round")
    parser.add_argument("--checkout", help="run this checkout's operator (default: this one's)")
    parser.add_argument(
        "--tenant-a-user",
        action="store_true",
        help="tenant A writes as a ServiceAccount (the API server's fairness applies) instead of the admin",
    )
    args = parser.parse_args()
    cluster, started_cluster, configuration, api = bench_cluster()
    spaces = (NS_A, NS_B, *(burst_namespace(r) for r in range(args.rounds)))
    for ns in spaces:
        create_namespace(cluster, ns)
    api_a = tenant_api(cluster, configuration) if args.tenant_a_user else api
    env = dict(os.environ)
    if args.checkout:
        env["PYTHONPATH"] = checkout_pythonpath(args.checkout)
    log = open(cluster.paths.logs / "operator-bench-fairness.log", "wb")  # noqa: SIM115 - the run's lifetime
    operator = start_operator("--log-level", "WARNING", stdout=log, env=env)
    try:
        docs = [manifests.template("pause"), manifests.warm_pool("pool", "pause", 0)]
        cluster.kubectl("apply", "-n", NS_B, "-f", "-", input=yaml.safe_dump_all(docs))
        flooded = [f"a-{i}" for i in range(FLOODED)]
        for name in flooded:
            api.create_namespaced_custom_object(GROUP, VERSION, NS_A, PLURAL, manifests.session(name, "nopool"))
        time.sleep(3)  # the operator's initial listing
        session_to_ready(api, "warmup")
        delete_all(api, NS_B)
        wait_machine_idle()
        timeline = Timeline(api, client.CoreV1Api(client.ApiClient(configuration)), NS_B)
        results: dict[str, list[float]] = {c: [] for c in CONDITIONS}
        writes = 0
        for r in range(args.rounds):
            order = CONDITIONS[r % 3 :] + CONDITIONS[: r % 3]
            for condition in order:
                stop, join = threading.Event(), None
                floods: list[Flood] = []
                if condition == "activity":
                    floods = [Flood(api_a, flooded[i::4], stop) for i in range(4)]
                    for flood in floods:
                        flood.start()
                    time.sleep(1)  # the flood under way
                elif condition == "burst":
                    underway = threading.Event()
                    join = burst(api_a, r, underway)
                    underway.wait(60)
                for s in range(args.samples):
                    results[condition].append(session_to_ready(api, f"{condition}-{r}-{s}", timeline=timeline))
                    print(f"round {r} {condition}: {results[condition][-1]:.3f} s", flush=True)
                stop.set()
                for flood in floods:
                    flood.join(30)
                    writes += flood.writes
                if join is not None:
                    join()  # A's 1,000 stay (waiting on no pool, they cost nothing more) until the end
                # Settled before the next condition: A's backlog done (the machine idle again: a B session
                # Ready alone came while the API server still served A's queued writes), B's sessions gone.
                delete_all(api, NS_B)
                settled = wait_machine_idle()
                print(f"round {r} {condition}: settled in {settled:.0f} s", flush=True)
        timeline.stop()
        print_table(results, args, writes)
        splits = {c: [v for k, v in SPLITS.items() if k.startswith(f"{c}-")] for c in CONDITIONS}
        print_split(splits)
        record_results(results, splits, args, writes)
    finally:
        stop_operator(operator)
        for ns in spaces:
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        if started_cluster:
            cluster.down()


OPERATOR_STEPS = [step for step, owner in zip(STEPS, OWNERS, strict=True) if owner == "operator"]
"""The operator's part of B's time: create -> claim created, and Sandbox Ready seen -> session Ready."""


def record_results(
    results: dict[str, list[float]], splits: dict[str, list[dict[str, float]]], args: argparse.Namespace, writes: int
) -> None:
    """The results file: per condition, B's whole create -> Ready and the operator's part of it (issue 54
    item 3's target: the operator's part within 1.1x quiet), every sample; the ratios to quiet."""
    record = Record.start(
        "bench_fairness", rounds=args.rounds, samples=args.samples, tenant_a_user=args.tenant_a_user, writes=writes
    )
    for condition in CONDITIONS:
        for value in results[condition]:
            record.sample(condition, "whole_s", value)
        for split in splits[condition]:
            record.sample(condition, "operator_s", sum(split[step] for step in OPERATOR_STEPS))
            record.sample(condition, "rest_s", sum(v for step, v in split.items() if step not in OPERATOR_STEPS))
    medians = record.medians()
    ratios = {
        f"{condition} / quiet, {column}": medians[condition][column] / medians["quiet"][column]
        for condition in CONDITIONS[1:]
        for column in ("operator_s", "whole_s")
        if column in medians.get(condition, {}) and medians.get("quiet", {}).get(column)
    }
    record.finish("s", ratios=ratios)


def print_table(results: dict[str, list[float]], args: argparse.Namespace, writes: int) -> None:
    quiet = statistics.median(results["quiet"])
    who = (args.checkout or "this checkout") + (", tenant A as a ServiceAccount" if args.tenant_a_user else "")
    print(
        f"Tenant B's session create -> Ready while tenant A churns ({who}; {args.rounds} rounds x"
        f" {args.samples} sessions, interleaved; load average {load_average():.1f})"
    )
    print(f"{'condition':<10} {'median':>9} {'p90':>9} {'ratio':>7}  target")
    for condition in CONDITIONS:
        values = sorted(results[condition])
        median = statistics.median(values)
        p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
        target = "" if condition == "quiet" else "ratio <= 1.10"
        timed_out = sum(1 for v in values if v >= TIMEOUT)
        note = f"  ({timed_out} of {len(values)} not Ready within {TIMEOUT:.0f} s)" if timed_out else ""
        row = f"{condition:<10} {1000 * median:>7.0f}ms {1000 * p90:>7.0f}ms {median / quiet:>7.2f}  {target}{note}"
        print(row)
    print(f"activity: {writes} annotation writes by tenant A on {FLOODED} sessions; burst: {BURST} creates per round")


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
