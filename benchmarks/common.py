"""What the benchmarks share: the operator as a process (without webhook, metrics or health ports), the
API server's request counts, /proc readings, a session's create -> Ready, and interleaved rounds."""

from __future__ import annotations

import io
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kubernetes import client

    from devcluster.cluster import Cluster

CLK_TCK = os.sysconf("SC_CLK_TCK")


class _ApiServer(Protocol):
    def api_get(self, path: str, timeout: float = ...) -> bytes: ...


class _Kubectl(Protocol):
    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]: ...


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """SIGTERM ends a run as ^C does: its finally blocks stop the operators and the cluster it started."""
    signal.signal(signal.SIGTERM, _interrupt)


def bench_cluster(pool: int = 32) -> tuple[Cluster, bool, client.Configuration, client.CustomObjectsApi]:
    """The local cluster (started unless it runs: then True, and the run stops it at its end) with the CRDs
    applied, the client's configuration for it (`pool` connections) and its custom objects API."""
    from kubernetes import client, config

    from devcluster.cluster import Cluster

    cluster = Cluster(out=io.StringIO())
    started = cluster.up()
    # Named, not read from $KUBECONFIG: the client reads that once, at its first import, whichever module did it.
    config.load_kube_config(config_file=str(cluster.paths.kubeconfig))
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = pool
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "crds/")
    return cluster, started, configuration, client.CustomObjectsApi(client.ApiClient(configuration))


def create_namespace(cluster: _Kubectl, name: str, timeout: float = 180.0) -> None:
    """Create `name`, first waiting (bounded) for a namespace of that name that the previous run of a
    benchmark left terminating (the benchmarks delete theirs without waiting)."""
    deadline = time.monotonic() + timeout
    while True:
        proc = cluster.kubectl("create", "namespace", name, check=False)
        if proc.returncode == 0:
            return
        if "being deleted" not in proc.stderr or time.monotonic() > deadline:
            raise RuntimeError(f"kubectl create namespace {name} failed: {proc.stderr.strip()}")
        time.sleep(1)


def checkout_pythonpath(checkout: str) -> str:
    """PYTHONPATH that runs another checkout's operator (its API package and operator package)."""
    root = Path(checkout).resolve()
    return os.pathsep.join(str(root / d) for d in ("api", "operator"))


class _CustomObjects(Protocol):
    def list_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str) -> Any: ...


def create_until_ready(api: Any, namespace: str, body: dict[str, Any], timeout: float) -> tuple[float, float] | None:
    """Create the AgentSession `body` in `namespace` and watch it: (created, Ready) on this process's monotonic
    clock, None when it is not Ready within `timeout`."""
    from kubernetes import watch  # here: a benchmark sets KUBECONFIG before the client is imported

    from agentsession_api import names

    plural = (names.GROUP, names.VERSION, namespace, names.SESSION_PLURAL)
    started = time.monotonic()
    api.create_namespaced_custom_object(*plural, body)
    w = watch.Watch()
    name = body["metadata"]["name"]
    for event in w.stream(
        api.list_namespaced_custom_object, *plural, field_selector=f"metadata.name={name}", timeout_seconds=int(timeout)
    ):
        if (event["object"].get("status") or {}).get("phase") == "Ready":
            w.stop()
            return started, time.monotonic()
    return None


def wait_pool_full(api: _CustomObjects, namespace: str, pool: str, replicas: int, timeout: float = 120) -> None:
    """Wait (bounded) until `pool` has `replicas` Ready Sandboxes of its own, not yet claimed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = api.list_namespaced_custom_object("agents.x-k8s.io", "v1beta1", namespace, "sandboxes")["items"]
        ready = 0
        for s in items:
            refs = s["metadata"].get("ownerReferences") or []
            owned = any(r["kind"] == "SandboxWarmPool" and r["name"] == pool for r in refs)
            conds = (s.get("status") or {}).get("conditions") or []
            if owned and any(c["type"] == "Ready" and c["status"] == "True" for c in conds):
                ready += 1
        if ready >= replicas:
            return
        time.sleep(0.1)
    raise TimeoutError(f"pool {namespace}/{pool} not full")


def apiserver_requests(cluster: _ApiServer) -> dict[tuple[str, str, str], float]:
    """The API server's requests so far (`apiserver_request_total`, every response code: a 409 costs it
    work too), by (verb, resource, subresource)."""
    counts: dict[tuple[str, str, str], float] = {}
    for line in cluster.api_get("/metrics", timeout=30).decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
        key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
        counts[key] = counts.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def start_operator(
    *extra: str, stdout: IO[Any] | int = subprocess.DEVNULL, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`python -m agentsession_operator` with no listeners, so it never collides with another one, and no cap
    on a namespace's sessions: the benchmarks hold up to 60,000 in one namespace, where the operator's default
    (--max-sessions-per-namespace, 1,000) would fail all but the first 1,000. Set through its environment
    variable, which an older checkout's operator (`--before`) ignores instead of refusing an unknown flag."""
    env = dict(os.environ if env is None else env)
    env.setdefault("MAX_SESSIONS_PER_NAMESPACE", "0")
    command = [
        sys.executable,
        "-m",
        "agentsession_operator",
        "--metrics-port",
        "0",
        "--health-port",
        "0",
        "--webhook-port",
        "0",
        *extra,
    ]
    return subprocess.Popen(command, stdout=stdout, stderr=subprocess.STDOUT, env=env)


def stop_operator(operator: subprocess.Popen[bytes]) -> None:
    operator.terminate()
    try:
        operator.wait(timeout=30)
    except subprocess.TimeoutExpired:
        operator.kill()
        operator.wait()


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def machine_busy(window: float = 1.0) -> float:
    """Fraction of all CPUs busy over `window` seconds (/proc/stat: everything but idle and iowait)."""

    def sample() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields) - idle, sum(fields)

    busy0, total0 = sample()
    time.sleep(window)
    busy1, total1 = sample()
    return (busy1 - busy0) / max(1, total1 - total0)


def wait_machine_idle(threshold: float = 0.25, quiet_seconds: int = 3, timeout: float = 300.0) -> float:
    """Wait (bounded) until the machine is below `threshold` busy for `quiet_seconds` seconds in a row:
    the backlog a condition left (the API server's, etcd's, the operator's) is done before the next one.
    Returns the seconds waited; past `timeout` it says so and returns (the next cell then reads high)."""
    started = time.monotonic()
    quiet = 0
    while quiet < quiet_seconds:
        if time.monotonic() - started > timeout:
            print(f"  (machine still busy after {timeout:.0f} s: going on)", flush=True)
            break
        quiet = quiet + 1 if machine_busy() < threshold else 0
    return time.monotonic() - started


def interleaved_ms(
    calls: dict[str, Callable[[], object]], rounds: int, samples: dict[str, list[float]] | None = None
) -> dict[str, float]:
    """Median milliseconds of each call: one of each per round, the order reversed every other round, so
    the machine's drifts hit every call alike. `samples` gets every call's seconds (benchmarks/results.py)."""
    times: dict[str, list[float]] = samples if samples is not None else {}
    for name in calls:
        times[name] = []
    for fn in calls.values():
        fn()  # warm connections and caches
    for i in range(rounds):
        for name, fn in list(calls.items())[:: 1 if i % 2 else -1]:
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
    return {name: 1000 * statistics.median(values) for name, values in times.items()}
