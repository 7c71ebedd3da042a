"""The client's in-pod scripts of a git ref (default HEAD~1) against the working tree's, side by side on the
same runc and gVisor pods of the real node (issue 29: what is ours in a call's cost).

Both versions of `langchain_k8s_client.commands` build each call (the old one from `git archive <ref>`,
imported as a package of its own); each wrapper is staged in the pod first, so every call is sent as
the client sends it (`sh -c '. ./.lkc-staging/w-<hash>.sh' sh ...`) in a raw keep-alive POST to the
runtime (the client's own decoding is the same code for both and left out). The four (runtime, version)
pairs run in interleaved rounds. Rows: `execute("true")` (default timeout: no watchdog),
`execute("true", timeout=60)` (the watchdog with the command's `sh`: `true` is a builtin),
`execute("/bin/true", timeout=60)` (a program: the new watchdog runs it without the `sh`), and grep over
1,000 files (budget 20 s). Processes per call: the pod's pid counter read by `sh -c 'echo $$'` before and
after one call (pids are handed out in order in the pod's pid namespace, runc's and gVisor's alike),
the smallest of 5 tries, the runtime's own process for the call included.
Run: `.venv/bin/python -m benchmarks.bench_wrapper [--ref HEAD~1] [--rounds 20]` (starts the real node
if none is up).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import io
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from benchmarks.bench_gvisor import RUNTIMES, pool_manifests, raw_post
from benchmarks.common import create_namespace, interleaved_ms, start_operator, stop_operator
from devcluster import errors
from devcluster.cluster import Cluster, Paths
from devcluster.realnode import configs, network

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)  # before the kubernetes client is imported

from langchain_k8s_client import AgentSessionSandbox, commands, script_text

NS = "bench-wrapper"
ROOT = Path(__file__).parents[1]
EXECUTES = {  # label: (command, timeout)
    'execute("true")': ("true", 300),
    'execute("true", timeout=60)': ("true", 60),
    'execute("/bin/true", timeout=60)': ("/bin/true", 60),
}
SWEEP_EVERY = 32  # as runtime.CAPTURE_SWEEP_EVERY


def old_commands(ref: str) -> ModuleType:
    """`langchain_k8s_client.commands` (and its scripts) as `ref` had them, as the package `lkc_old`."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-wrapper-"))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "client/langchain_k8s_client"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    (tmp / "client" / "langchain_k8s_client").rename(tmp / "lkc_old")
    sys.path.insert(0, str(tmp))
    return importlib.import_module("lkc_old.commands")


def post(ip: str, command: str) -> dict[str, object]:
    """One POST on a fresh connection (the setup steps and pid reads; the timed calls keep theirs)."""
    import http.client

    conn = http.client.HTTPConnection(ip, 8888, timeout=60)
    conn.request(
        "POST", "/execute", body=json.dumps({"command": command}), headers={"Content-Type": "application/json"}
    )
    answer: dict[str, object] = json.loads(conn.getresponse().read())
    conn.close()
    return answer


class Caller:
    """The calls of one version of the scripts to one pod: staged wrappers, fresh capture numbers."""

    def __init__(self, mod: ModuleType, ip: str, staging_dir: str, capture: str, exclude_dirs: tuple[str, ...]) -> None:
        self.mod, self.ip, self.staging_dir, self.capture, self.seq = mod, ip, staging_dir, capture, 0
        self.exclude_dirs = exclude_dirs
        self.staged: set[str] = set()

    def execute(self, command: str, timeout: int) -> str:
        self.seq += 1
        runner = "none" if timeout >= 300 else "timeout"
        wrapped = self.mod.user_command(
            command,
            timeout=timeout,
            max_output=100_000,
            staging_dir=self.staging_dir,
            cwd="",
            runner=runner,
            capture=self.capture,
            seq=self.seq,
            sweep=SWEEP_EVERY if self.seq % SWEEP_EVERY == 1 else 0,
        )
        if wrapped.wrapper not in self.staged:
            path = f"{self.staging_dir}/{wrapped.wrapper}"
            stage = script_text.runtime_command(["sh", "-c", 'printf %s "$1" >"$2"', "sh", wrapped.script, path])
            assert post(self.ip, stage).get("exit_code") == 0
            self.staged.add(wrapped.wrapper)
        text: str = wrapped.staged()
        return text

    def grep(self) -> str:
        build = self.mod.build_gnu_grep
        # A ref before issue 53 item 5 ran grep under `timeout` (budget=); since, the client keeps the time.
        budget = {"budget": 20.0} if "budget" in inspect.signature(build).parameters else {"tag": "0f1e2d3c4b5a6978"}
        text: str = build(["needle"], "/tmp/g", exclude_dirs=self.exclude_dirs, cap=10_001, **budget)
        return text


def timed_call(caller: Caller, build: Callable[[Caller], str], check: Callable[[str], None]) -> Callable[[], None]:
    """A keep-alive POST per call, each call built afresh (its own capture number)."""
    import http.client

    conn = http.client.HTTPConnection(caller.ip, 8888, timeout=60)

    def call() -> None:
        body = json.dumps({"command": build(caller)}).encode()
        try:
            conn.request("POST", "/execute", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            conn.close()  # the runtime closed an idle keep-alive connection: a new one (a loopback connect)
            conn.request("POST", "/execute", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
        answer = json.loads(response.read())
        check(str(answer.get("stdout", "")))

    return call


def processes(caller: Caller, build: Callable[[Caller], str]) -> int:
    """Pids handed out in the pod for one call (the runtime's process for it included), fewest of 5."""
    pid = script_text.runtime_command(["sh", "-c", "echo $$"])
    counts = []
    for _ in range(5):
        command = build(caller)  # staged before the first pid read
        before = int(str(post(caller.ip, pid)["stdout"]))
        post(caller.ip, command)
        after = int(str(post(caller.ip, pid)["stdout"]))
        counts.append(after - before - 1)
    return min(counts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ref", default="HEAD~1", help="the git ref whose scripts are the old version")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    versions = {"old": old_commands(args.ref), "new": commands}
    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up(node="real")
    if cluster.node != "real":
        raise SystemExit("bench_wrapper needs the real node: stop the kwok cluster first (make cluster-down)")
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", f"{ROOT}/crds")
    create_namespace(cluster, NS)
    for name, runtime_class in RUNTIMES.items():
        docs = pool_manifests(name, runtime_class, 1)
        for doc in docs:
            doc["metadata"]["namespace"] = NS
        cluster.apply(docs)
    operator = start_operator(
        f"--cluster-cidr={network.POD_CIDR}",
        f"--cluster-cidr={network.SERVICE_CIDR}",
        f"--client-cidr={network.HOST_IP}/32",
    )
    try:
        sessions = {name: AgentSessionSandbox(f"w-{name}", NS, warm_pool=name, ttl="1h") for name in RUNTIMES}
        callers: dict[str, Caller] = {}
        for name, backend in sessions.items():
            backend.wait_ready()
            backend.execute("true")
            info = backend.transport.runtime_info()
            make = 'mkdir -p /tmp/g && cd /tmp/g && for i in $(seq 1 1000); do echo "line $i needle" > f$i.txt; done'
            assert backend.execute(make, timeout=180).exit_code == 0
            ip = backend.session.pod_ips[0]
            for version, mod in versions.items():
                excluded = tuple(backend.grep_exclude_dirs)
                callers[f"{name} {version}"] = Caller(mod, ip, info.staging_dir, f"b{version}", excluded)

        def ok(stdout: str) -> None:
            assert stdout.startswith("@LKC 0 "), stdout[:200]

        def thousand(stdout: str) -> None:
            assert stdout.count("\n") == 1000, stdout[:200]

        cases: dict[str, tuple[Callable[[Caller], str], Callable[[str], None]]] = {
            label: (functools.partial(Caller.execute, command=cmd, timeout=t), ok)
            for label, (cmd, t) in EXECUTES.items()
        }
        cases["grep over 1,000 files"] = (Caller.grep, thousand)
        rows = []
        for label, (build, check) in cases.items():
            ms = interleaved_ms({k: timed_call(c, build, check) for k, c in callers.items()}, args.rounds)
            counts = {k: processes(c, build) for k, c in callers.items()}
            rows.append((label, ms, counts))
            print(f"{label}: {ms} {counts}", file=sys.stderr, flush=True)
        ips = {name: b.session.pod_ips[0] for name, b in sessions.items()}
        bare = interleaved_ms({name: raw_post(ip, "true") for name, ip in ips.items()}, args.rounds)
        one = {name: processes(callers[f"{name} new"], lambda _c: "true") for name in RUNTIMES}

        with open("/proc/loadavg") as f:
            load = f.read().split()[:3]
        print(
            f"the scripts of {args.ref} (old) against the working tree's (new), runc and gVisor "
            f"({configs.GVISOR_PLATFORM}), medians of {args.rounds} interleaved rounds in ms, load {' '.join(load)}"
        )
        head = ["runc old", "runc new", "new/old", "gVisor old", "gVisor new", "new/old", "gV/runc old", "gV/runc new"]
        print(f"{'':<34}" + "".join(f"{h:>12}" for h in head) + "   processes (runc old/new, gVisor old/new)")
        for label, ms, counts in rows:
            ro, rn, go, gn = ms["runc old"], ms["runc new"], ms["gvisor old"], ms["gvisor new"]
            cells = [ro, rn, rn / ro, go, gn, gn / go, go / ro, gn / rn]
            procs = f"{counts['runc old']}/{counts['runc new']}, {counts['gvisor old']}/{counts['gvisor new']}"
            print(f"{label:<34}" + "".join(f"{v:>12.2f}" for v in cells) + f"   {procs}")
        print(
            f"{'raw POST `true` (calibration)':<34}{bare['runc']:>12.2f}{'':>24}{bare['gvisor']:>12.2f}{'':>24}"
            f"{bare['gvisor'] / bare['runc']:>12.2f}{'':>12}   {one['runc']}, {one['gvisor']}"
        )
        for backend in sessions.values():
            backend.delete_session()
    finally:
        stop_operator(operator)
        cluster.kubectl("delete", "namespace", NS, "--wait=false")
        if started_cluster:
            cluster.down()


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
