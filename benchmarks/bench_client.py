"""The client on a real AgentSession pod, side by side with a raw HTTP call and with langchain-k8s.

On the same pod, interleaved rounds: `execute("true")` through AgentSessionSandbox vs a raw POST of
`sh -c true` to the runtime (httpx, as the issue measured it; and the stdlib's http.client, one send
and the least Python) vs langchain-k8s 0.7.1's `KubernetesSandbox` (attached to the same claim);
10 MiB upload and download; `grep` over 1,000 files, also split into the pod's part (each client's
command POSTed raw) and the client's. Prints medians and ratios.
Run: `.venv/bin/python -m benchmarks.bench_client [--rounds 30]` (needs the `bench` extra).
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import os
import shlex
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import create_namespace, interleaved_ms, start_operator, stop_operator
from benchmarks.results import Record
from devcluster import errors
from devcluster.cluster import Cluster, Paths

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)  # before the kubernetes client is imported

import httpx
from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.models import SandboxInClusterConnectionConfig

from langchain_k8s_client import AgentSessionSandbox, gnu_grep, pyscripts
from langchain_k8s_client.script_text import runtime_command

NS = "bench-client"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def median_ms(fn: Callable[[], Any], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def attempt(fn: Callable[[], Any], rounds: int) -> str:
    try:
        return f"{median_ms(fn, rounds):.1f}"
    except Exception as exc:  # a peer's known defect is a result here, not a crash
        return f"fails ({type(exc).__name__}: {str(exc)[:60]})"


_BARE_GREP = "grep -rHnIF --null -e needle -- /tmp/g"
"""GNU grep with our flags, without the record cap (`head`)."""


def raw_post(conn: http.client.HTTPConnection, command: str) -> Callable[[], None]:
    """A raw POST of one command to the runtime (keep-alive, the body encoded once: the least Python)."""
    body = json.dumps({"command": command}).encode()

    def post() -> None:
        conn.request("POST", "/execute", body=body, headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        answer.read()
        assert answer.status == 200, answer.status

    return post


def _ours_grep_command(ours: AgentSessionSandbox) -> str:
    """The command our grep("needle", "/tmp/g") sends (GNU grep found by the probe): its time budget is the
    client's, no process in the pod."""
    cap = pyscripts.GREP_MATCH_LIMIT + 1
    return gnu_grep.build_gnu_grep(
        ["needle"], "/tmp/g", exclude_dirs=ours.grep_exclude_dirs, cap=cap, tag=gnu_grep.new_tag()
    )


def _ours_under_timeout(ours: AgentSessionSandbox) -> str:
    """The same under `timeout -s KILL <budget>`, as the client ran it until the budget moved to the client
    (issue 53 item 5): the watchdog process that cost most of the difference with langchain-k8s in the pod."""
    return runtime_command(
        ["timeout", "-s", "KILL", f"{pyscripts.GREP_TIME_BUDGET:g}", *shlex.split(_ours_grep_command(ours))]
    )


def _peer_grep_command(peer: Any) -> str:
    """The command langchain-k8s's grep("needle", "/tmp/g") sends (deepagents' builder in its `sh -c`)."""
    from deepagents.backends.sandbox import _build_grep_cmd

    return f"sh -c {shlex.quote(_build_grep_cmd('needle', '/tmp/g', None, None, exclude_dirs=peer.grep_exclude_dirs))}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--grep-rounds", type=int, default=200, help="rounds of the grep rows")
    args = parser.parse_args()
    try:
        from langchain_k8s import KubernetesSandbox
    except ImportError:
        raise SystemExit("install the bench extra: pip install -e '.[bench]'") from None
    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up()
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", f"{ROOT}/crds")
    create_namespace(cluster, NS)
    cluster.kubectl("apply", "-n", NS, "-f", f"{ROOT}/examples/00-python-pool.yaml")
    operator = start_operator()
    try:
        ours = AgentSessionSandbox("bench", NS, warm_pool="python-pool", ttl="1h")
        view = ours.wait_ready()
        ours.execute("true")  # connect once: every measurement below is steady state
        ip = view.pod_ips[0]
        raw = httpx.Client(trust_env=False)
        assert view.claim_name
        handle: Any = SandboxClient(connection_config=SandboxInClusterConnectionConfig()).get_sandbox(
            view.claim_name, namespace=NS
        )
        peer = KubernetesSandbox(sandbox=handle)
        peer.execute("true")
        n = args.rounds
        rows: list[tuple[str, str, str, str]] = []
        record = Record.start("bench_client", rounds=n, grep_rounds=args.grep_rounds)
        execute_s: dict[str, list[float]] = {}
        grep_s: dict[str, list[float]] = {}

        def raw_true() -> None:
            raw.post(f"http://{ip}:8888/execute", json={"command": "sh -c true"}, timeout=30).raise_for_status()

        stdlib_true = raw_post(http.client.HTTPConnection(ip, 8888, timeout=30), "sh -c true")

        # The four interleaved so machine noise hits all alike.
        execute_ms = interleaved_ms(
            {
                "ours": lambda: ours.execute("true"),
                "raw": raw_true,
                "stdlib": stdlib_true,
                "langchain-k8s": lambda: peer.execute("true"),
            },
            n,
            execute_s,
        )
        o, r, sl, p = (execute_ms[k] for k in ("ours", "raw", "stdlib", "langchain-k8s"))
        rows.append(
            (
                'execute("true")',
                f"{o:.2f}",
                f"raw POST sh -c true {r:.2f} (http.client {sl:.2f}); langchain-k8s {p:.2f}",
                f"vs raw {o / r:.2f} (target <= 1.15; vs http.client {o / sl:.2f}); "
                f"vs langchain-k8s {o / p:.2f} (target <= 1.0)",
            )
        )

        blob = os.urandom(10 * 1024 * 1024)
        up_ours = median_ms(lambda: ours.upload_files([("/tmp/bench/blob", blob)]), max(5, n // 5))
        # langchain-k8s sends a file base64-encoded inside one command argument, which the runtime then
        # shlex-splits: 10 MiB would keep the runtime busy for many minutes. Measure it at 256 KiB, once.
        small = blob[: 256 * 1024]
        up_peer = attempt(lambda: _check_upload(peer.upload_files([("/tmp/bench/peer-blob", small)])), 1)
        up_peer = f"{up_peer} (256 KiB)"
        rows.append(("upload 10 MiB", f"{up_ours:.1f}", f"langchain-k8s {up_peer}", ""))
        check = ours.download_files(["/tmp/bench/blob"])[0]
        assert check.content == blob, "download mismatch"
        down_ours = median_ms(lambda: ours.download_files(["/tmp/bench/blob"]), max(5, n // 5))
        down_peer = attempt(lambda: _check_download(peer.download_files(["/tmp/bench/blob"])[0], blob), 1)
        rows.append(("download 10 MiB", f"{down_ours:.1f}", f"langchain-k8s {down_peer}", ""))

        ours.execute(
            'mkdir -p /tmp/g && cd /tmp/g && for i in $(seq 1 1000); do echo "line $i needle" > f$i.txt; done',
            timeout=120,
        )
        # Interleaved as well, both checked to find all 1,000 first.
        assert (
            len(ours.grep("needle", "/tmp/g").matches or []) == len(peer.grep("needle", "/tmp/g").matches or []) == 1000
        )
        # Beside the two clients, each one's command POSTed raw (what the pod spends on it; the rest is the
        # client's), ours as it ran before under `timeout`, and GNU grep alone.
        grep_conn = http.client.HTTPConnection(ip, 8888, timeout=60)  # the first one idled out meanwhile
        posts = {
            "ours in the pod": _ours_grep_command(ours),
            "langchain-k8s in the pod": _peer_grep_command(peer),
            "ours under timeout (before)": _ours_under_timeout(ours),
            "grep alone": runtime_command(["sh", "-c", f"export LC_ALL=C; {_BARE_GREP} || true"]),
        }
        calls: dict[str, Callable[[], object]] = {
            "ours": lambda: ours.grep("needle", "/tmp/g"),
            "langchain-k8s": lambda: peer.grep("needle", "/tmp/g"),
            **{name: raw_post(grep_conn, command) for name, command in posts.items()},
        }
        grep_t = interleaved_ms(calls, args.grep_rounds, grep_s)
        go, gp = grep_t["ours"], grep_t["langchain-k8s"]
        rows.append(
            (
                "grep over 1,000 files",
                f"{go:.1f}",
                f"langchain-k8s {gp:.1f}",
                f"vs langchain-k8s {go / gp:.2f} (target <= 1.0)",
            )
        )
        po, pp = grep_t["ours in the pod"], grep_t["langchain-k8s in the pod"]
        rows.append(("  of it in the pod", f"{po:.1f}", f"langchain-k8s {pp:.1f}", f"{po / pp:.2f}"))
        rows.append(("  of it in the client", f"{go - po:.1f}", f"langchain-k8s {gp - pp:.1f}", ""))
        for name in ("ours under timeout (before)", "grep alone"):
            rows.append((f"  pod: {name}", f"{grep_t[name]:.1f}", "", f"{grep_t[name] / pp:.2f}"))
        print(f"AgentSessionSandbox on a python-runtime pod, medians in ms ({n} rounds for execute)")
        for name, value, others, ratio in rows:
            print(f"{name:<24} {value:>9}   {others:<60} {ratio}")
        for row, table in (("execute", execute_s), ("grep 1000 files", grep_s)):
            for column, values in table.items():
                for seconds in values:
                    record.sample(row, column, 1000 * seconds)
        record.finish(
            "ms",
            ratios={
                "execute ours / raw": o / r,
                "execute ours / langchain-k8s": o / p,
                "grep ours / langchain-k8s": go / gp,
                "grep in the pod ours / langchain-k8s": po / pp,
            },
        )
        ours.delete_session()
    finally:
        stop_operator(operator)
        cluster.kubectl("delete", "namespace", NS, "--wait=false")
        if started_cluster:
            cluster.down()


def _check_upload(responses: list[Any]) -> None:
    if responses[0].error:
        raise RuntimeError(f"error {responses[0].error}")


def _check_download(response: Any, expected: bytes) -> None:
    if response.error or response.content != expected:
        raise RuntimeError(f"error {response.error}, {len(response.content or b'')} of {len(expected)} bytes")


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
