"""The router path against the pod-IP path (issue 51 item 2): execute, upload, download, on the real node.

One session, two clients of it in this process, both with the same app ServiceAccount's token: one reaches the
pod at its IP (the default), the other goes through config/components/sandbox-router (upstream's router,
``--authz-mode=scoped-token``) with the operator's per-session credentials. Execute and upload reuse the
tokens the client asked for together (one issuer call per five minutes); a download's path is new each time,
so each download above the inline budget (2 MiB; "download 3 MiB") asks the issuer for its own token: the
"issuer call" column times that call alone. Rounds
interleaved, the order reversed every other round. Real node only (the router is a pod; root).
Run: `DEVCLUSTER_NODE=real .venv/bin/python -m benchmarks.bench_router --rounds 30`.
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

os.environ.setdefault("DEVCLUSTER_NODE", "real")

from benchmarks.common import create_namespace, interleaved_ms, start_operator, stop_operator, wait_machine_idle
from benchmarks.results import Record
from devcluster import errors, kubeconfig
from devcluster.cluster import Cluster, Paths, node_kind
from devcluster.ports import free_port

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)

from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
from kubernetes import config

from langchain_k8s_client import AgentSessionSandbox
from langchain_k8s_client.router_credentials import RouterCredentials
from testkit import manifests, sandbox_router
from testkit.operator_args import network_args

NS = "bench-router"
APP = "bench-app"
PAYLOAD = b"x" * 4096
BIG = b"y" * (3 << 20)  # above the client's inline download budget (2 MiB): fetched by GET /download/<staged>
PATHS = ("pod IP", "router")
OPERATIONS = ("execute", "upload 4 KiB", "download 4 KiB", "download 3 MiB")


def _app_client(cluster: Cluster, directory: Path) -> Any:
    """The app's API client: a ServiceAccount allowed the namespace's sessions and their router credentials."""
    rbac = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": APP, "namespace": NS}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": APP, "namespace": NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "agentsession-client"},
            "subjects": [{"kind": "ServiceAccount", "name": APP, "namespace": NS}],
        },
    ]
    role = yaml.safe_load((sandbox_router.ROOT / "config" / "client-rbac" / "role.yaml").read_text())
    role["metadata"]["namespace"] = NS
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([role, *rbac]))
    token = cluster.kubectl("create", "token", APP, "-n", NS, "--duration=2h").stdout.strip()
    path = kubeconfig.write_token(
        directory / "app.kubeconfig",
        cluster.server,
        cluster.paths.pki / "ca.crt",
        token,
        f"system:serviceaccount:{NS}:{APP}",
        NS,
    )
    return config.new_client_from_config(config_file=str(path))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    if node_kind() != "real":
        raise SystemExit(f"bench_router measures the real node (the router is a pod); DEVCLUSTER_NODE={node_kind()}")
    from devcluster.realnode import network

    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up()
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "crds/")
    directory = Path(tempfile.mkdtemp(prefix="bench-router-"))
    key, key_file = sandbox_router.new_signing_key(directory)
    create_namespace(cluster, NS)
    cluster.kubectl("create", "namespace", sandbox_router.NAMESPACE, check=False)
    objects = sandbox_router.objects(key, network.HOST_IP, network.NODE_IP)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    cluster.kubectl(
        "-n", sandbox_router.NAMESPACE, "rollout", "status", f"deployment/{sandbox_router.NAME}", "--timeout=180s"
    )
    router_ip = cluster.kubectl(
        "-n", sandbox_router.NAMESPACE, "get", "service", sandbox_router.NAME, "-o", "jsonpath={.spec.clusterIP}"
    ).stdout.strip()
    pool = [manifests.template("py", manifests.PYTHON_RUNTIME_IMAGE), manifests.warm_pool("pool", "py", 1)]
    cluster.kubectl("apply", "-n", NS, "-f", "-", input=yaml.safe_dump_all(pool))
    app = _app_client(cluster, directory)
    operator = start_operator(
        "--namespace",
        NS,
        "--lease-name",
        "agentsession-bench-router",
        *network_args(),
        *sandbox_router.operator_args(key_file, free_port(), f"http://{router_ip}:8080"),
    )
    record = Record.start("bench_router", args.rounds, payload_bytes=len(PAYLOAD))
    try:
        direct = AgentSessionSandbox("bench", NS, warm_pool="pool", ttl="1h", api_client=app)
        routed = AgentSessionSandbox(
            "bench", NS, connection=SandboxDirectConnectionConfig(api_url=f"http://{router_ip}:8080"), api_client=app
        )
        for backend in (direct, routed):
            backend.upload_files([("/tmp/bench.bin", PAYLOAD), ("/tmp/big.bin", BIG)])
        issuer = routed._resolver._credentials  # the routed client's own credentials object
        assert isinstance(issuer, RouterCredentials)
        calls: dict[str, Any] = {}
        for name, backend in zip(PATHS, (direct, routed), strict=True):
            calls[f"{name}|execute"] = lambda b=backend: b.execute("true", timeout=30)
            calls[f"{name}|upload 4 KiB"] = lambda b=backend: b.upload_files([("/tmp/up.bin", PAYLOAD)])
            calls[f"{name}|download 4 KiB"] = lambda b=backend: b.download_files(["/tmp/bench.bin"])
            calls[f"{name}|download 3 MiB"] = lambda b=backend: b.download_files(["/tmp/big.bin"])
        calls["router|issuer call"] = lambda: issuer._ask([("GET", "/download/.lkc-staging/bench")])
        print(f"load before: {wait_machine_idle():.2f}", flush=True)
        samples: dict[str, list[float]] = {}
        interleaved_ms(calls, args.rounds, samples)
        for call, seconds in samples.items():
            row, column = call.split("|")
            for value in seconds:
                record.sample(row, column, 1000 * value)
        direct.delete_session()
        direct.close()
        routed.close()
    finally:
        stop_operator(operator)
        cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        for doc in objects:
            if doc["kind"] not in ("Role", "RoleBinding"):
                cluster.kubectl(
                    "delete",
                    doc["kind"].lower(),
                    doc["metadata"]["name"],
                    "-n",
                    sandbox_router.NAMESPACE,
                    "--wait=false",
                    check=False,
                )
        if started_cluster:
            cluster.down()
    medians = record.medians()
    ratios = {f"router / pod IP, {op}": medians["router"][op] / medians["pod IP"][op] for op in OPERATIONS}
    ratios["issuer call / pod-IP execute"] = medians["router"]["issuer call"] / medians["pod IP"]["execute"]
    print(f"{args.rounds} rounds interleaved; ms per call (median), one session, the real node")
    print(f"{'path':<8}" + "".join(f"{c:>16}" for c in (*OPERATIONS, "issuer call")))
    for row in PATHS:
        print(
            f"{row:<8}" + "".join(f"{medians[row].get(c, float('nan')):>16.2f}" for c in (*OPERATIONS, "issuer call"))
        )
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}x")
    record.finish(unit="ms", medians=medians, ratios=ratios)


if __name__ == "__main__":
    errors.run(main)
