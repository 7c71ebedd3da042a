"""The node kinds behind one interface (devcluster/nodes.py): the cluster picks one, and no node module
imports the cluster (the circle cluster.py <-> realnode/node.py is gone)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from devcluster import kwoknode, nodes
from devcluster.cluster import Cluster
from devcluster.paths import Paths
from devcluster.realnode import network
from devcluster.realnode.node import RealNode


@pytest.mark.parametrize("module", ["devcluster.nodes", "devcluster.kwoknode", "devcluster.realnode.node"])
def test_a_node_module_imports_alone_and_never_the_cluster(module: str) -> None:
    code = f"import sys, {module}; print('devcluster.cluster' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.strip() == "False", proc.stdout + proc.stderr


def test_the_cluster_drives_the_kind_it_runs(tmp_path: Path) -> None:
    cluster = Cluster(Paths(tmp_path))
    kwok: nodes.Node = cluster.node_for("kwok")
    real: nodes.Node = cluster.node_for("real")
    assert isinstance(kwok, kwoknode.KwokNode) and isinstance(real, RealNode)
    assert (kwok.name, kwok.pod_cidr) == (kwoknode.NODE_NAME, kwoknode.POD_CIDR)
    assert (real.name, real.pod_cidr) == ("devcluster-real-1", network.POD_CIDR)
    assert cluster.node_name == kwok.name and cluster.pod_cidr == kwok.pod_cidr  # no state yet: kwok
    cluster.state = {"node": "real", "ports": {"registry": 5123}}
    assert cluster.node_name == real.name and cluster.pod_cidr == network.POD_CIDR
    node = cluster.node_for("real")
    assert isinstance(node, RealNode) and node.registry_port == 5123
    assert "real node devcluster-real-1" in node.status() and kwoknode.POD_CIDR in kwok.status()
