"""The kwok node: a simulated Node (kwok) whose pods the pod runner starts as bubblewrap-confined
processes, each on its own 127.x address. Starts in seconds; serves thousands of pause pods."""

from __future__ import annotations

import json
import os
import sys

from devcluster import build, runtimes
from devcluster.nodes import ControlPlane

NODE_NAME = "devcluster-node-1"
# Loopback, so the host reaches pods as an in-cluster client would. Override to run two clusters at once.
POD_CIDR = os.environ.get("DEVCLUSTER_POD_CIDR", "127.1.0.0/16")


class KwokNode:
    name = NODE_NAME
    pod_cidr = POD_CIDR

    def __init__(self, host: ControlPlane) -> None:
        self.host = host

    def up(self) -> None:
        paths = self.host.paths
        config = paths.root / "kwok.yaml"
        config.write_text(runtimes.kwok_stages())
        self.host.apply(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": NODE_NAME,
                    "labels": {
                        "type": "kwok",
                        "kubernetes.io/hostname": NODE_NAME,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                    },
                    "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                },
                "spec": {"podCIDR": POD_CIDR, "podCIDRs": [POD_CIDR]},
            }
        )
        pid = self.host.start_process(
            "kwok",
            [
                str(build.KWOK.path("kwok")),
                f"--kubeconfig={paths.kubeconfig}",
                f"--config={config}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-label-selector=type=kwok",
                "--node-ip=127.0.0.1",
                f"--cidr={POD_CIDR}",
                "--node-lease-duration-seconds=40",
                "--server-address=",
            ],
        )

        def node_ready() -> bool:
            node = json.loads(self.host.kubectl("get", "node", NODE_NAME, "-o", "json").stdout)
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
            # The node lifecycle controller lifts the not-ready taint new nodes get; until then nothing schedules.
            return ready and not node["spec"].get("taints")

        self.host.wait("kwok (node Ready)", node_ready, 60, "kwok", pid)

    def serve(self) -> None:
        """The pod runner: it starts each pod scheduled here as a confined process."""
        paths = self.host.paths
        ready = paths.root / "podrunner.ready"
        ready.unlink(missing_ok=True)
        env = dict(os.environ, KUBECONFIG=str(paths.kubeconfig), DEVCLUSTER_DIR=str(paths.root))
        pid = self.host.start_process(
            "pod-runner", [sys.executable, "-m", "devcluster.podrunner", "--node", NODE_NAME], env=env
        )
        self.host.wait("pod-runner", ready.exists, 60, "pod-runner", pid)

    def down(self, pids: dict[str, int]) -> None:
        """Nothing of its own to sweep first: the cluster stops kwok and the pod runner (which stops every
        runtime it started) in reverse start order, then sweeps runtimes a hard kill left."""

    def status(self) -> str:
        return f"kwok node {NODE_NAME}, pods in {POD_CIDR}"
