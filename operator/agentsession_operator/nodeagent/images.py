"""Where a checkpoint image lives on the node, and which runsc container is a pod's sandbox (files only)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from agentsession_operator.decisions.hibernate import is_valid_checkpoint_name


class RequestError(ValueError):
    """A request the agent refuses (bad names): answered 400, nothing done."""


def image_dir(root: Path, namespace: str, name: str) -> Path:
    """``<root>/<namespace>/<name>``, for DNS-label names only (no separator, no ``..``)."""
    if not is_valid_checkpoint_name(namespace) or not is_valid_checkpoint_name(name):
        raise RequestError(f"namespace and name must be DNS labels: {namespace!r}, {name!r}")
    return root / namespace / name


def prepare(root: Path, namespace: str, name: str) -> Path:
    """An empty directory to write the image into, beside its final place, parents root-only (0700).

    The image is written to ``.<name>.partial`` and renamed by :func:`publish` only once runsc succeeded,
    so an agent killed mid-checkpoint leaves no image a pod could be restored from.
    """
    final = image_dir(root, namespace, name)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    final.parent.mkdir(mode=0o700, exist_ok=True)
    partial = final.parent / f".{name}.partial"
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(mode=0o700)
    return partial


def publish(root: Path, namespace: str, name: str, partial: Path) -> Path:
    """Move a complete image into place (replacing an older one of the same name)."""
    final = image_dir(root, namespace, name)
    if final.exists():
        shutil.rmtree(final)
    partial.rename(final)
    return final


def discard(partial: Path) -> None:
    shutil.rmtree(partial, ignore_errors=True)


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def delete(root: Path, namespace: str, name: str) -> bool:
    """Delete one image; False when there was none."""
    path = image_dir(root, namespace, name)
    if not path.exists():
        return False
    shutil.rmtree(path)
    return True


def sandbox_id(task_state: Path, namespace: str, pod: str) -> str | None:
    """The runsc id of the pod's sandbox (its pause container), found in containerd's task bundles.

    By namespace and pod name (the operator reads no pods); two live sandboxes of one name (an old pod's
    left behind) are refused rather than guessed between.
    """
    found: list[str] = []
    for spec in task_state.glob("*/config.json"):
        try:
            notes = json.loads(spec.read_text()).get("annotations") or {}
        except (OSError, ValueError):
            continue
        if (
            notes.get("io.kubernetes.cri.sandbox-name") == pod
            and notes.get("io.kubernetes.cri.sandbox-namespace") == namespace
            and notes.get("io.kubernetes.cri.container-type") == "sandbox"
        ):
            found.append(spec.parent.name)
    if len(found) > 1:
        raise RequestError(f"{len(found)} sandboxes of pod {namespace}/{pod} on this node: not guessing")
    return found[0] if found else None
