"""Issue 49 item 2: what one session costs a replica's memory, minimal against maximal.

A tenant may fill every free-form field of its sessions up to what etcd stores (its default request limit,
1.5 MiB): 64 env values of 16 KiB, 32 pod annotations of 4 KiB, 8 volume claim templates with 4 annotations
of 4 KiB each, 200 foreign finalizers, 64 labels; and keep half of them deleted under those finalizers.
What such a session costs the operator must not depend on those bytes: its cache keeps what decisions
read (kube/projection.session_projection).

Three namespaces: one empty, one of N minimal sessions, one of N maximal ones (half of them deleted, held by
their finalizers). Every session names a warm pool that does not exist, so it waits (no claim, no pod) and
the measure is the operator's own. Each round restarts a fresh replica on each namespace in turn (the order
reversed every round) and samples it until it settles after its first pass (benchmarks.bench_restart's
`settle`): its settled RSS. Per session: (RSS over N sessions - RSS over the empty namespace) / N. Before
issue 49 item 2 a maximal session cost about 2.2 MiB (the issue's measure); the figures now are KiB per
session and the ratio maximal / minimal.
Run: `.venv/bin/python -m benchmarks.bench_session_cost [--sessions 200] [--rounds 3]`.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from typing import Any

from kubernetes import client, config

from agentsession_api import types as t
from benchmarks.bench_restart import MISSING_POOL, settle
from benchmarks.common import load_average, start_operator, stop_on_sigterm, stop_operator
from benchmarks.populate import GROUP, PLURAL, VERSION, create_sessions, list_sessions, wait_populated
from benchmarks.results import Record
from devcluster.cluster import Cluster, Paths

NS = "bench-cost-"
EMPTY, MINIMAL, MAXIMAL = NS + "empty", NS + "minimal", NS + "maximal"
FINALIZER = "bench.example.com/hold"
MIB = 1024 * 1024


def minimal(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AgentSession",
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": MISSING_POOL}, "idleTimeout": "8h"},
    }


def maximal(name: str) -> dict[str, Any]:
    """As large as the CRD and etcd let a tenant make a session where no decision reads the bytes (about
    1.3 MiB: the shape of tests/unit/operator/test_op_session_projection.py's attack), its finalizers
    foreign, its labels at the bound."""
    body = minimal(name)
    body["metadata"]["finalizers"] = [FINALIZER] + [f"example.com/{i:03d}-{'f' * 55}" for i in range(199)]
    body["metadata"]["labels"] = {f"example.com/l{i:02d}-{'k' * 50}": "v" * 63 for i in range(t.MAX_SESSION_LABELS)}
    body["spec"].update(
        env=[{"name": f"V{i}", "value": "x" * t.MAX_ENV_VALUE} for i in range(t.MAX_ENV)],
        podAnnotations={f"example.com/a{i}": "y" * t.MAX_ANNOTATION_VALUE for i in range(t.MAX_MAP_ENTRIES)},
        volumeClaimTemplates=[
            {
                "metadata": {
                    "name": f"v{v}",
                    "annotations": {f"example.com/a{i}": "z" * t.MAX_ANNOTATION_VALUE for i in range(4)},
                },
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }
            for v in range(t.MAX_VOLUME_CLAIM_TEMPLATES)
        ],
    )
    return body


def populate(cluster: Cluster, api: client.CustomObjectsApi, n: int) -> None:
    """The sessions each namespace lacks, then half the maximal ones deleted (held by their finalizers), and
    a first pass over all of them by one operator (each has a phase: what a replica then takes over)."""
    for ns in (EMPTY, MINIMAL, MAXIMAL):
        cluster.kubectl("create", "namespace", ns, check=False)
    for ns, make in ((MINIMAL, minimal), (MAXIMAL, maximal)):
        there = {s["metadata"]["name"] for s in list_sessions(api, ns)}
        create_sessions(api, [(ns, f"s{i:05d}") for i in range(n) if f"s{i:05d}" not in there], make)
    for i in range(0, n, 2):
        api.delete_namespaced_custom_object(GROUP, VERSION, MAXIMAL, PLURAL, f"s{i:05d}")
    log = open(cluster.paths.logs / "operator-cost-populate.log", "wb")  # noqa: SIM115
    operator = start_operator("--log-level", "WARNING", "--namespace", MINIMAL, "--namespace", MAXIMAL, stdout=log)
    try:
        for ns in (MINIMAL, MAXIMAL):
            wait_populated(lambda ns=ns: _phased(api, ns), n, 1800.0, f"phased in {ns}", poll=5)  # type: ignore[misc]
    finally:
        stop_operator(operator)


def _phased(api: client.CustomObjectsApi, namespace: str) -> int:
    return sum(1 for s in list_sessions(api, namespace) if (s.get("status") or {}).get("phase"))


def release(api: client.CustomObjectsApi) -> None:
    """The finalizers off the maximal sessions (a cluster kept running can then delete the namespace)."""
    for s in list_sessions(api, MAXIMAL):
        api.patch_namespaced_custom_object(
            GROUP, VERSION, MAXIMAL, PLURAL, s["metadata"]["name"], {"metadata": {"finalizers": None}}
        )


def restart(cluster: Cluster, namespace: str) -> dict[str, Any]:
    path = cluster.paths.logs / f"operator-cost-{namespace}.log"
    with open(path, "ab") as log:
        offset = log.tell()
        started = time.monotonic()
        operator = start_operator("--log-level", "INFO", "--namespace", namespace, stdout=log)
        try:
            return settle(operator, started, path, offset, first_pass=True)
        finally:
            stop_operator(operator)


def main() -> None:
    stop_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=200, help="sessions in each of the two namespaces")
    parser.add_argument("--rounds", type=int, default=3, help="restarts of a replica on each namespace")
    args = parser.parse_args()
    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up()
    config.load_kube_config(config_file=str(Paths().kubeconfig))
    api = client.CustomObjectsApi()
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "crds/")
    record = Record.start("bench_session_cost", rounds=args.rounds, sessions=args.sessions)
    order = [EMPTY, MINIMAL, MAXIMAL]
    try:
        populate(cluster, api, args.sessions)
        for round_ in range(args.rounds):
            for ns in order if round_ % 2 == 0 else order[::-1]:
                r = restart(cluster, ns)
                record.sample("settled RSS", ns.removeprefix(NS), r["settled_mib"])
                record.sample("peak RSS", ns.removeprefix(NS), r["peak_mib"])
                print(
                    f"{time.strftime('%H:%M:%S')} round {round_ + 1} {ns}: settled {r['settled_mib']:.1f} MiB"
                    f" (peak {r['peak_mib']:.1f}) in {r['settled_s']:.1f} s, load {load_average():.1f}",
                    flush=True,
                )
    finally:
        if not started_cluster:
            release(api)
        else:
            cluster.down()
    settled = {ns: statistics.median(v) for ns, v in record.samples["settled RSS"].items()}
    per_session = {
        kind: (settled[kind] - settled["empty"]) * MIB / 1024 / args.sessions for kind in ("minimal", "maximal")
    }
    medians = record.medians()
    medians["KiB per session"] = per_session
    ratio = per_session["maximal"] / per_session["minimal"] if per_session["minimal"] > 0 else float("inf")
    print(f"\nA replica's memory per waiting session ({args.sessions} of each, medians of {args.rounds} rounds)")
    print(f"{'':>10} {'settled MiB':>12} {'KiB/session':>12}")
    for kind in ("empty", "minimal", "maximal"):
        cost = f"{per_session[kind]:.1f}" if kind in per_session else ""
        print(f"{kind:>10} {settled[kind]:>12.1f} {cost:>12}")
    print(f"maximal / minimal per session: {ratio:.2f}x")
    record.finish(unit="MiB; KiB per session", medians=medians, ratios={"maximal / minimal per session": ratio})


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
