"""The real node's network: one network namespace the cluster creates, joined to the host by a veth pair.

Everything of the node (containerd, the kubelet, kube-proxy, the NetworkPolicy controller and every pod)
lives in that namespace or in pod namespaces below it. The host routes the pod and Service ranges into it
and nowhere else; the namespace itself has no default route, so no pod traffic can leave the machine. The
ranges come from 198.18.0.0/15 (reserved for network tests), which no real network here uses.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

# Several clusters may run side by side (one per checkout): DEVCLUSTER_NET_INDEX (0-7) gives each its own
# slice of the ranges and its own namespace.
INDEX = int(os.environ.get("DEVCLUSTER_NET_INDEX", "0"))
if not 0 <= INDEX <= 7:
    raise ValueError(f"DEVCLUSTER_NET_INDEX={INDEX}: expected 0 to 7")
# Pods of the real node; the Node's podCIDR (one node: the first /24 of it).
POD_CIDR = f"198.18.{32 * INDEX}.0/19"
NODE_POD_CIDR = f"198.18.{32 * INDEX}.0/24"
# Services (both node kinds): the `kubernetes` Service is the first address, DNS the tenth.
SERVICE_CIDR = f"198.19.{16 * INDEX}.0/20"
KUBERNETES_SERVICE_IP = f"198.19.{16 * INDEX}.1"
DNS_SERVICE_IP = f"198.19.{16 * INDEX}.10"
# The veth pair between the host and the node's namespace (a /30 of 198.19.255.0/24).
HOST_IP = f"198.19.255.{4 * INDEX + 1}"
NODE_IP = f"198.19.255.{4 * INDEX + 2}"
LINK_PREFIX = 30


@dataclass(frozen=True)
class NodeNetwork:
    """Names of one node's network namespace and veth pair."""

    netns: str = f"agentsession-node{INDEX}"

    @property
    def host_link(self) -> str:
        # Interface names hold 15 characters: keep the index in them, or two clusters' links collide.
        return f"agsnode{INDEX}-h"

    @property
    def node_link(self) -> str:
        return f"agsnode{INDEX}-n"

    @property
    def netns_path(self) -> str:
        return f"/run/netns/{self.netns}"

    def enter(self, cmd: list[str]) -> list[str]:
        """`cmd` run inside the node's network namespace only (not `ip netns exec`: that remounts /sys,
        hiding the cgroup hierarchies the kubelet and runc need)."""
        return ["nsenter", f"--net={self.netns_path}", "--", *cmd]

    def setup_commands(self) -> list[list[str]]:
        ns, host, node = self.netns, self.host_link, self.node_link
        return [
            ["ip", "netns", "add", ns],
            ["ip", "link", "add", host, "type", "veth", "peer", "name", node],
            ["ip", "link", "set", node, "netns", ns],
            ["ip", "addr", "add", f"{HOST_IP}/{LINK_PREFIX}", "dev", host],
            ["ip", "link", "set", host, "up"],
            ["ip", "-n", ns, "addr", "add", f"{NODE_IP}/{LINK_PREFIX}", "dev", node],
            ["ip", "-n", ns, "link", "set", node, "up"],
            ["ip", "-n", ns, "link", "set", "lo", "up"],
            # The node routes between its pods, and between them and the host; nothing else.
            self.enter(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]),
            ["ip", "route", "replace", POD_CIDR, "via", NODE_IP, "dev", host],
            ["ip", "route", "replace", SERVICE_CIDR, "via", NODE_IP, "dev", host],
        ]

    def exists(self) -> bool:
        return os.path.exists(self.netns_path)

    def create(self) -> None:
        if self.exists():
            self.destroy()
        for cmd in self.setup_commands():
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")

    def destroy(self) -> None:
        """Remove the namespace (its end of the veth pair and with it the host's end and routes)."""
        subprocess.run(["ip", "link", "del", self.host_link], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
