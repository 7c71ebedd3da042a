"""The two kinds of node side by side, and the one small interface between them and the cluster.

`Cluster` (devcluster/cluster.py) starts the control plane and drives a `Node` through it: `up()` once
the API server and the controllers run, `serve()` once agent-sandbox is installed, `down()` first when
the cluster stops. A node sees the cluster only as a `ControlPlane`: where the files are, its own state
entries, processes started and waited for like every other component, and kubectl. Nodes import this
module, never the cluster: no circle (the cluster picks the kind, devcluster/cluster.py `node_for`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any, Protocol

from devcluster.paths import Paths

AGENT_SANDBOX_NAMESPACE = "agent-sandbox-system"  # where agent-sandbox's controller and router run


class ControlPlane(Protocol):
    """What a node uses of the cluster it joins."""

    @property
    def paths(self) -> Paths: ...

    @property
    def state(self) -> dict[str, Any]:
        """The cluster's saved state (state.json): ports, pids; a node adds its own entries, then saves."""
        ...

    def save_state(self) -> None: ...

    def start_process(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> int:
        """Start a component detached (logs/<name>.log); the cluster stops it on down."""
        ...

    def wait(self, what: str, check: Callable[[], bool], timeout: float, component: str, pid: int) -> None:
        """Until check() holds; a clear error with the component's log tail if it exits or times out."""
        ...

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]: ...

    def apply(self, manifest: dict[str, Any] | list[dict[str, Any]]) -> None: ...

    def get_json(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None: ...


class Node(Protocol):
    """One kind of node (kwok: devcluster/kwoknode.py; real: devcluster/realnode/node.py)."""

    name: str  # the Node object's name
    pod_cidr: str  # where its pods get their addresses

    def up(self) -> None:
        """Start the node and wait until its Node is Ready and schedulable."""
        ...

    def serve(self) -> None:
        """Once agent-sandbox is installed: what runs sandboxes' pods or reaches them (pod runner, router)."""
        ...

    def down(self, pids: dict[str, int]) -> None:
        """Stop this node's processes (popped from `pids`) and sweep what they leave behind; also after a
        hard kill, from the saved state alone."""
        ...

    def status(self) -> str:
        """One line for `python -m devcluster status`."""
        ...
