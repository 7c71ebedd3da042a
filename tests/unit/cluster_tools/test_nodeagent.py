"""devcluster's node agent manifests (issue 33): config/components/nodeagent with this node's paths."""

from __future__ import annotations

from pathlib import Path

from devcluster import nodeagent
from devcluster.realnode import configs


def _docs() -> dict[str, dict]:
    dirs = configs.NodeDirs(Path("/repo/.cluster/node"))
    return {
        d["kind"]: d for d in nodeagent.manifests(dirs, Path("/cache/bin/runsc"), operator_source="198.19.255.5/32")
    }


def test_the_daemonset_mounts_this_nodes_paths() -> None:
    pod = _docs()["DaemonSet"]["spec"]["template"]["spec"]
    paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert paths == {
        "runsc": "/cache/bin/runsc",
        "runsc-root": "/repo/.cluster/node/containerd/runsc/k8s.io",
        "task-state": "/repo/.cluster/node/containerd/state/io.containerd.runtime.v2.task/k8s.io",
        "checkpoints": "/repo/.cluster/node/checkpoints",
    }
    assert not pod.get("hostNetwork") and not pod.get("hostPID"), "control sockets are files: no host namespaces"


def test_only_the_operators_address_reaches_the_agent() -> None:
    policy = _docs()["NetworkPolicy"]["spec"]
    assert policy["ingress"] == [
        {"from": [{"ipBlock": {"cidr": "198.19.255.5/32"}}], "ports": [{"protocol": "TCP", "port": 8490}]}
    ]


def test_the_agent_has_a_namespace_of_its_own_privileged_one() -> None:
    docs = _docs()
    assert docs["Namespace"]["metadata"]["name"] == "agentsession-nodeagent"
    assert docs["Namespace"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert docs["DaemonSet"]["metadata"]["namespace"] == "agentsession-nodeagent"


def test_the_operator_is_told_where_the_agents_are() -> None:
    assert nodeagent.operator_args() == [
        "--node-agent=agentsession-nodeagent/app.kubernetes.io/name=agentsession-nodeagent",
        "--node-agent-account=agentsession-system/agentsession-operator",
        "--node-agent-ca-secret=agentsession-system/agentsession-nodeagent-ca",
    ]


def test_devcluster_applies_every_resource_of_the_component() -> None:
    """A file added to the component (the CA's Secret) and not to devcluster's list left the agent unsigned."""
    import yaml

    kustomization = yaml.safe_load((nodeagent.COMPONENT / "kustomization.yaml").read_text())
    assert list(nodeagent.RESOURCES) == kustomization["resources"]
