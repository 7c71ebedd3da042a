"""The node agent's DaemonSet as shipped (config/components/nodeagent) holds no more than `runsc checkpoint`,
`runsc events --stats` and its image files need (issue 49 item 5).

Measured on devcluster's real node (docs/security.md, row "49.5 (least privilege)"): root (uid 0) without a
single capability, under RuntimeDefault's seccomp, with no_new_privs and a read-only root, runs every request
of the agent, because every file it touches is root's own. A non-root agent cannot: runsc's state root and
containerd's task bundles are root's (0711 directories, 0640 state files, a 0755 control socket), and
capabilities added to a non-root container reach only its bounding set (Kubernetes sets no ambient ones).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).parents[3]
DAEMONSET = ROOT / "config" / "components" / "nodeagent" / "daemonset.yaml"

LEAST_PRIVILEGE = {
    "runAsUser": 0,
    "runAsNonRoot": False,
    "privileged": False,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _pod() -> dict[str, Any]:
    return dict(yaml.safe_load(DAEMONSET.read_text())["spec"]["template"]["spec"])


def test_the_agent_runs_as_root_without_any_capability_under_seccomp() -> None:
    """Attack: code running in the agent (a bug in its HTTP server, a poisoned image) had a privileged
    container: every capability and device of the node, no seccomp. Now exactly the measured minimum."""
    (container,) = _pod()["containers"]
    assert container["securityContext"] == LEAST_PRIVILEGE


def test_the_agent_shares_no_host_namespace_and_mounts_only_its_four_paths() -> None:
    pod = _pod()
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    (container,) = pod["containers"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert set(mounts) == {"runsc", "runsc-root", "task-state", "checkpoints"}
    assert mounts["runsc"].get("readOnly") and mounts["task-state"].get("readOnly")


GVISOR_NODE = {"agentsession.dev/gvisor": "true"}
"""The label of a node whose containerd has gVisor's runsc handler: the agent runs there and nowhere else."""


def test_the_agent_lands_only_on_gvisor_nodes() -> None:
    """A root container with runsc's and containerd's state mounted ran on every node of the cluster, gVisor or
    not (and made those host directories where there were none). Now only on nodes labelled as gVisor's;
    devcluster's real node carries the label (its kubelet's --node-labels)."""
    from devcluster.realnode import node

    assert _pod().get("nodeSelector") == GVISOR_NODE
    assert all(node.NODE_LABELS.get(k) == v for k, v in GVISOR_NODE.items()), node.NODE_LABELS
