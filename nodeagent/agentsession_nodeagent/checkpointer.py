"""``runsc checkpoint`` of one pod's sandbox into its image directory."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from agentsession_nodeagent import images


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


class OverBound(RuntimeError):
    """Answered 413: the sandbox holds more memory than the request's bound (maxBytes); nothing is written
    (the operator suspends the session as Suspend, CheckpointTooLarge, saying both numbers)."""

    def __init__(self, measured: int, bound: int) -> None:
        super().__init__(
            f"the sandbox holds {measured} bytes of memory (runsc events --stats), over this checkpoint's bound "
            f"of {bound} bytes: not checkpointed, nothing was written"
        )
        self.measured = measured
        self.bound = bound


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


def _containers(node: Node, sandbox: str) -> list[str]:
    """The ids of the sandbox's containers (its own pause container and the pod's), from runsc's state files
    (``<container>_sandbox:<sandbox>.state``)."""
    suffix = f"_sandbox:{sandbox}.state"
    return sorted(p.name[: -len(suffix)] for p in node.runsc_root.glob(f"*{suffix}"))


def sandbox_memory(node: Node, sandbox: str) -> int:
    """The bytes of memory the sandbox holds, as its sentry accounts them: the sum over its containers of
    ``runsc events --stats``'s memory usage.

    Why this and not the host's view: under gVisor the application's memory is pages of the sentry's memory
    file, mapped into systrap's stub processes, so the sandbox process's RSS misses most of it (measured on
    this node: 40 MB of RSS for a sandbox holding 200 MiB), and the pod cgroup's memory.current counts the
    page cache of the gofer's reads too, and needs the host's cgroup tree in the agent. The sentry's own
    accounting is what ``runsc checkpoint`` saves (measured: 222 MB for an image of 213 MB, uncompressed, the
    default), through the same state root and control socket the checkpoint uses. The pause container
    answers no usage; the pod's containers each answer theirs."""
    total = 0
    for container in _containers(node, sandbox):
        cmd = [str(node.runsc), f"--root={node.runsc_root}", "events", "--stats", container]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
        except subprocess.TimeoutExpired as e:
            raise CheckpointError("runsc events --stats timed out: the sandbox's memory is not measured") from e
        if proc.returncode != 0:
            raise CheckpointError(
                f"runsc events --stats exited {proc.returncode}: {proc.stderr.strip()[-300:]}; not checkpointed"
            )
        try:
            usage = json.loads(proc.stdout)["data"]["memory"]["usage"].get("usage", 0)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(f"runsc events --stats answered no memory usage: {proc.stdout[:200]!r}") from e
        if not isinstance(usage, int) or usage < 0:
            raise CheckpointError(f"runsc events --stats answered a memory usage of {usage!r}")
        total += usage
    return total


def checkpoint(
    node: Node, namespace: str, pod: str, name: str, restore_into: str = "", max_bytes: int | None = None
) -> Taken:
    """Checkpoint the pod's whole sandbox (every container) and stop it; the image's size. The image
    restores only into pod ``restore_into`` (the pod the wake creates; ``pod`` itself when not named).
    ``max_bytes``: the session's bound; a sandbox holding more memory is refused before anything is written
    (None, an operator older than the bound: not measured, the operator judges the image afterwards)."""
    if not pod:
        raise images.RequestError("no pod named")
    restore_into = images.check_target(restore_into or pod)  # refused before the pod is stopped
    sandbox = images.sandbox_id(node.task_state, namespace, pod)
    if sandbox is None:
        raise NotOnThisNode(f"no sandbox of pod {namespace}/{pod} on this node")
    if not any(node.runsc_root.glob(f"{sandbox}*")):
        raise NotGVisor(f"pod {namespace}/{pod} does not run under runsc (no runsc state of sandbox {sandbox})")
    if max_bytes is not None:
        measured = sandbox_memory(node, sandbox)
        if measured > max_bytes:
            raise OverBound(measured, max_bytes)
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
