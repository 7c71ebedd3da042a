"""The node agent (issue 33, idleAction Hibernate) on devcluster's real node: config/components/nodeagent with
this checkout's node paths, and the token a host-process operator calls it with.

`python -m devcluster nodeagent` (on a running real-node cluster) builds the operator's image (the agent runs
`python -m agentsession_nodeagent` from it), pushes it into the cluster's registry and applies the
component's ServiceAccount, RBAC, DaemonSet and NetworkPolicy with:

- the hostPaths of this node: the runsc binary of the build cache, runsc's state root for containerd's
  `k8s.io` namespace (its state files and each sandbox's control socket, a unix socket *file* there: runsc
  never uses abstract sockets, so no hostNetwork is needed), containerd's task bundles (the agent finds a
  pod's sandbox id in their config.json) and `.cluster/node/checkpoints/` (the shim's restore extension
  reads the images there);
- its own namespace, agentsession-nodeagent (Pod Security privileged, for its hostPath volumes: the agent
  runs as root without any capability; the operator's namespace is restricted);
- the NetworkPolicy's peer: the operator here runs on the host (tests, `make operator`), whose packets reach
  the node's pods from the host's end of the node's veth, so that address, not the operator's pods, is
  admitted (as install.narrow_webhook_ingress does for the API server).

The operator then takes `operator_args()`: `--node-agent=...`, `--node-agent-account=...`, its own
ServiceAccount, for which it mints each node's agent a token of that node's audience (TokenRequest; the
component's Role allows exactly that), as it does in a cluster, and `--node-agent-ca-secret=...`, the CA with
which it signs each agent's certificate; the agent is Ready once signed (`wait_ready`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO, Any

import yaml

from devcluster import build
from devcluster.cluster import REPO_ROOT, Cluster, ClusterError
from devcluster.realnode import configs, network

COMPONENT = REPO_ROOT / "config" / "components" / "nodeagent"
NAMESPACE = "agentsession-nodeagent"
"""The agent's own namespace (Pod Security privileged, for the hostPath volumes); the operator's is restricted."""
OPERATOR_NAMESPACE = "agentsession-system"
NAME = "agentsession-nodeagent"
SELECTOR = f"{NAMESPACE}/app.kubernetes.io/name={NAME}"
OPERATOR_ACCOUNT = "agentsession-operator"
CONTAINERD_NAMESPACE = "k8s.io"
# The component's files the cluster gets (operator_token.yaml patches the operator's Deployment: not here).
RESOURCES = (
    "namespace.yaml",
    "service_account.yaml",
    "rbac.yaml",
    "ca_secret.yaml",
    "daemonset.yaml",
    "network_policy.yaml",
)
CA_SECRET = f"{OPERATOR_NAMESPACE}/agentsession-nodeagent-ca"


def host_paths(dirs: configs.NodeDirs, runsc: Path) -> dict[str, str]:
    """The DaemonSet's volumes by name: this node's paths."""
    return {
        "runsc": str(runsc),
        "runsc-root": str(dirs.runsc_root / CONTAINERD_NAMESPACE),
        "task-state": str(dirs.containerd / "state" / "io.containerd.runtime.v2.task" / CONTAINERD_NAMESPACE),
        "checkpoints": str(dirs.checkpoints),
    }


def manifests(
    dirs: configs.NodeDirs, runsc: Path, operator_source: str = f"{network.HOST_IP}/32"
) -> list[dict[str, Any]]:
    """The component's objects for this node (pure: reads only the component's files)."""
    docs = [d for f in RESOURCES for d in yaml.safe_load_all((COMPONENT / f).read_text()) if d]
    paths = host_paths(dirs, runsc)
    for doc in docs:
        if doc["kind"] == "DaemonSet":
            volumes = doc["spec"]["template"]["spec"]["volumes"]
            for volume in volumes:
                volume["hostPath"]["path"] = paths[volume["name"]]
            assert {v["name"] for v in volumes} == set(paths), "the component's volumes changed: update host_paths"
            # The tag stays while the image changes (install pushes this checkout's build under it): with the
            # component's IfNotPresent, a node that pulled it once (a cluster kept between runs) kept running
            # the first build after every restart. From the cluster's own registry, a pull is cheap.
            for container in doc["spec"]["template"]["spec"]["containers"]:
                container["imagePullPolicy"] = "Always"
        elif doc["kind"] == "NetworkPolicy":
            ingress = doc["spec"]["ingress"]
            assert len(ingress) == 1, "the component's NetworkPolicy changed: update manifests"
            ingress[0]["from"] = [{"ipBlock": {"cidr": operator_source}}]
    return docs


def _list(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": docs}


def has_gvisor() -> bool:
    return build.GVISOR.path("runsc").exists()


def _require(cluster: Cluster) -> None:
    if not cluster.is_running() or cluster.node != "real":
        raise ClusterError("the node agent needs a running real-node cluster: `make cluster-up NODE=real`")
    if not has_gvisor():
        raise ClusterError(f"no runsc at {build.GVISOR.path('runsc')}: the node has no gVisor to checkpoint")


def install(cluster: Cluster, out: IO[str] = sys.stderr) -> None:
    """The agent on the node, from the operator's image as built from this checkout: Ready once an operator
    with operator_args() signs its certificate (wait_ready)."""
    from devcluster import images  # buildah: only here

    _require(cluster)
    images.build_image(images.OPERATOR, out)
    images.push(images.OPERATOR, cluster.registry_address, images.OPERATOR.dir() / "push.log")
    dirs = configs.NodeDirs(cluster.paths.root / "node")
    docs = manifests(dirs, build.GVISOR.path("runsc"))
    # Some of them (the operator's token-minting RBAC) live in the operator's namespace, and the operator mints
    # the agents' tokens for its ServiceAccount: a bench on a fresh cluster has neither yet. Applied on their
    # own, so uninstall() never deletes them.
    operator_identity = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": OPERATOR_ACCOUNT, "namespace": OPERATOR_NAMESPACE},
        },
    ]
    for doc in operator_identity:
        cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(doc))
    cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        "-",
        input=json.dumps({"kind": "List", "apiVersion": "v1", "items": docs}),
    )
    # The tag stays while the image changes: restart to run the one just pushed.
    cluster.kubectl("-n", NAMESPACE, "rollout", "restart", f"daemonset/{NAME}")
    print(
        f"[devcluster] node agent installed ({SELECTOR}): Ready once an operator started with "
        f"{' '.join(operator_args())} signs its certificate",
        file=out,
        flush=True,
    )


def wait_ready(cluster: Cluster, out: IO[str] = sys.stderr, timeout: str = "180s") -> None:
    """The agent serving: its certificate signed (by the operator started with operator_args()), its pod Ready."""
    cluster.kubectl("-n", NAMESPACE, "rollout", "status", f"daemonset/{NAME}", f"--timeout={timeout}")
    print(f"[devcluster] node agent running ({SELECTOR})", file=out, flush=True)


def uninstall(cluster: Cluster) -> None:
    dirs = configs.NodeDirs(cluster.paths.root / "node")
    docs = manifests(dirs, build.GVISOR.path("runsc"))
    cluster.kubectl(
        "delete", "--ignore-not-found", "--wait=true", "--timeout=120s", "-f", "-", input=json.dumps(_list(docs))
    )


def operator_args() -> list[str]:
    return [
        f"--node-agent={SELECTOR}",
        f"--node-agent-account={OPERATOR_NAMESPACE}/{OPERATOR_ACCOUNT}",
        f"--node-agent-ca-secret={CA_SECRET}",
    ]
