"""AgentSession-to-Ready through the operator vs a SandboxClaim created directly with the SDK.

Side by side in one run, on the same warm pool (python runtime), interleaved so machine noise hits
both alike: cold (pool of 0) and warm (pool kept full). Prints medians, the ratio and the operator's
absolute added latency. Run: `.venv/bin/python -m benchmarks.bench_operator [--rounds 9]`.
Uses the running local control plane (or starts one) and starts its own operator process.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from typing import Any

import yaml

from benchmarks.common import create_namespace, start_operator, stop_operator, wait_pool_full
from devcluster.cluster import Cluster, Paths

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)

from k8s_agent_sandbox import SandboxClient  # after KUBECONFIG: the client reads it at import
from k8s_agent_sandbox.models import SandboxInClusterConnectionConfig
from kubernetes import client, config, watch

from tests.e2e import manifests

NS = "bench-operator"


def kubectl_apply(cluster: Cluster, *docs: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", NS, "-f", "-", input=yaml.safe_dump_all(list(docs)))


def session_to_ready(api: client.CustomObjectsApi, name: str, pool: str, timeout: float = 120) -> float:
    started = time.monotonic()
    api.create_namespaced_custom_object(
        "agentsession.dev", "v1alpha1", NS, "agentsessions", manifests.session(name, pool)
    )
    w = watch.Watch()
    for event in w.stream(
        api.list_namespaced_custom_object,
        "agentsession.dev",
        "v1alpha1",
        NS,
        "agentsessions",
        field_selector=f"metadata.name={name}",
        timeout_seconds=int(timeout),
    ):
        if ((event["object"].get("status") or {}).get("phase")) == "Ready":
            w.stop()
            return time.monotonic() - started
    raise TimeoutError(name)


def sdk_to_ready(sdk: SandboxClient, name: str, pool: str) -> float:
    started = time.monotonic()
    sdk.create_sandbox(pool, namespace=NS, sandbox_ready_timeout=120, claim_name=name)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up()
    config.load_kube_config()
    api = client.CustomObjectsApi()
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "crds/")
    create_namespace(cluster, NS)
    operator = start_operator()
    sdk: Any = SandboxClient(connection_config=SandboxInClusterConnectionConfig())
    try:
        kubectl_apply(
            cluster,
            manifests.template("py", manifests.PYTHON_RUNTIME_IMAGE),
            manifests.warm_pool("cold", "py", 0),
            manifests.warm_pool("warm", "py", 2),
        )
        time.sleep(3)  # the operator's initial listing
        results: dict[str, list[float]] = {k: [] for k in ("op-cold", "sdk-cold", "op-warm", "sdk-warm")}
        for i in range(args.rounds):
            # Alternate which goes first so neither always meets a busier machine.
            order = ["op", "sdk"] if i % 2 == 0 else ["sdk", "op"]
            for who in order:
                if who == "op":
                    results["op-cold"].append(session_to_ready(api, f"op-cold-{i}", "cold"))
                else:
                    results["sdk-cold"].append(sdk_to_ready(sdk, f"sdk-cold-{i}", "cold"))
            for who in order:
                wait_pool_full(api, NS, "warm", 2)
                if who == "op":
                    results["op-warm"].append(session_to_ready(api, f"op-warm-{i}", "warm"))
                else:
                    results["sdk-warm"].append(sdk_to_ready(sdk, f"sdk-warm-{i}", "warm"))
        med = {k: statistics.median(v) for k, v in results.items()}
        print(f"AgentSession (operator) vs SandboxClaim (SDK) to Ready, python runtime, {args.rounds} rounds each")
        print(f"{'start':<6} {'operator':>10} {'SDK':>10} {'ratio':>7} {'added':>9}  target")
        for kind, target in (("cold", "ratio <= 1.1"), ("warm", "added <= 30 ms")):
            op, direct = med[f"op-{kind}"], med[f"sdk-{kind}"]
            print(f"{kind:<6} {op:>9.3f}s {direct:>9.3f}s {op / direct:>7.2f} {1000 * (op - direct):>7.0f}ms  {target}")
    finally:
        stop_operator(operator)
        cluster.kubectl("delete", "namespace", NS, "--wait=false")
        if started_cluster:
            cluster.down()


if __name__ == "__main__":
    main()
