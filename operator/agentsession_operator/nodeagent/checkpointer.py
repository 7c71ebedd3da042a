"""``runsc checkpoint`` of one pod's sandbox into its image directory."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from agentsession_operator.nodeagent import images


@dataclass(frozen=True)
class Node:
    runsc: Path
    runsc_root: Path
    """runsc's state root for containerd's k8s.io namespace."""
    task_state: Path
    """containerd's task bundles (``.../io.containerd.runtime.v2.task/k8s.io``)."""
    checkpoint_root: Path
    timeout: float = 120.0
    max_bytes: int | None = None
    """The node's budget for every image together (--max-bytes): a checkpoint is refused once they reach it."""
    min_free_bytes: int = 0
    """The free space the checkpoint root's disk keeps (--min-free-bytes): below it a checkpoint is refused."""


@dataclass(frozen=True)
class Taken:
    size_bytes: int
    seconds: float


class CheckpointError(RuntimeError):
    pass


class NotGVisor(ValueError):
    """Answered 409: the pod runs on this node, not under gVisor."""


class NotOnThisNode(LookupError):
    """Answered 404: the operator asks the next node's agent."""


class NodeFull(RuntimeError):
    """Answered 507: the node's images reach its budget, or its disk its floor; nothing is written (the
    operator suspends the session as Suspend, saying this)."""


def room_for_one_more(node: Node) -> None:
    """Refuse before writing: the kubelet evicts other tenants' pods when checkpoints fill a node's disk."""
    if node.max_bytes is not None:
        used = images.size_of(node.checkpoint_root) if node.checkpoint_root.is_dir() else 0
        if used >= node.max_bytes:
            raise NodeFull(
                f"this node's checkpoint images take {used} bytes, its checkpoint budget is {node.max_bytes} "
                "(the node agent's --max-bytes): no new image until some are deleted"
            )
    existing = node.checkpoint_root
    while not existing.exists():
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    if free < node.min_free_bytes:
        raise NodeFull(
            f"this node's disk has {free} bytes of free space, under the floor of {node.min_free_bytes} "
            "(the node agent's --min-free-bytes): no new image"
        )


def checkpoint(node: Node, namespace: str, pod: str, name: str, restore_into: str = "") -> Taken:
    """Checkpoint the pod's whole sandbox (every container) and stop it; the image's size. The image
    restores only into pod ``restore_into`` (the pod the wake creates; ``pod`` itself when not named)."""
    if not pod:
        raise images.RequestError("no pod named")
    restore_into = images.check_target(restore_into or pod)  # refused before the pod is stopped
    sandbox = images.sandbox_id(node.task_state, namespace, pod)
    if sandbox is None:
        raise NotOnThisNode(f"no sandbox of pod {namespace}/{pod} on this node")
    if not any(node.runsc_root.glob(f"{sandbox}*")):
        raise NotGVisor(f"pod {namespace}/{pod} does not run under runsc (no runsc state of sandbox {sandbox})")
    room_for_one_more(node)
    partial = images.prepare(node.checkpoint_root, namespace, name)
    started = time.monotonic()
    cmd = [str(node.runsc), f"--root={node.runsc_root}", "checkpoint", f"--image-path={partial}", sandbox]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=node.timeout, check=False)
    except subprocess.TimeoutExpired as e:
        images.discard(partial)
        raise CheckpointError(f"runsc checkpoint timed out after {node.timeout} s") from e
    if proc.returncode != 0:
        images.discard(partial)
        raise CheckpointError(f"runsc checkpoint exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    images.write_target(partial, restore_into)
    images.write_manifest(partial)  # the shim restores only an image that still matches it
    path = images.publish(node.checkpoint_root, namespace, name, partial)
    return Taken(images.size_of(path), time.monotonic() - started)
