"""Where a checkpoint image lives on the node, and which runsc container is a pod's sandbox (files only)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from agentsession_api.node_agent import is_valid_checkpoint_name

MANIFEST = "agentsession.sha256"
"""The file in an image listing ``<sha256 hex>  <file>`` for every other file: the shim's restore
extension (devcluster/gvisor/restoreext, ManifestName) restores only an image that matches it."""
FAILED_SUFFIX = ".restore-failed"
"""``<root>/<namespace>/.<name>.restore-failed``: the extension's record of a restore that failed (the pod
started fresh), read back by :func:`delete` (restoreext's FailedSuffix)."""
TARGET = "agentsession.pod"
"""The file in an image naming the one pod of its namespace it restores into (restoreext's TargetName):
another pod naming the image starts fresh (issue 49 item 1)."""
RESTORED_SUFFIX = ".restored"
"""``<root>/<namespace>/.<name>.restored``: the extension's record of the sandbox that took the image (only
a pod's first sandbox restores; restoreext's RestoredSuffix). A new image of the name clears it."""
MAX_FAILURE_BYTES = 2048


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


def check_target(pod: str) -> str:
    """The pod an image restores into: a DNS label (a Pod's, a Sandbox's name), else refused."""
    if not is_valid_checkpoint_name(pod):
        raise RequestError(f"the pod to restore into must be a DNS label: {pod!r}")
    return pod


def write_target(image: Path, pod: str) -> None:
    """Name the pod the image restores into (before :func:`write_manifest`, which then covers it)."""
    (image / TARGET).write_text(check_target(pod))


def write_manifest(image: Path) -> None:
    """The sha256 of every file of a complete image, in it (before :func:`publish`)."""
    lines = []
    for path in sorted(image.iterdir()):
        if path.name == MANIFEST or not path.is_file():
            continue
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        lines.append(f"{digest.hexdigest()}  {path.name}\n")
    (image / MANIFEST).write_text("".join(lines))


def failure_record(root: Path, namespace: str, name: str) -> Path:
    final = image_dir(root, namespace, name)
    return final.parent / f".{name}{FAILED_SUFFIX}"


def taken_record(root: Path, namespace: str, name: str) -> Path:
    final = image_dir(root, namespace, name)
    return final.parent / f".{name}{RESTORED_SUFFIX}"


def publish(root: Path, namespace: str, name: str, partial: Path) -> Path:
    """Move a complete image into place (replacing an older one of the same name, and the records of a
    restore from it: the new image has been neither restored nor failed)."""
    final = image_dir(root, namespace, name)
    if final.exists():
        shutil.rmtree(final)
    failure_record(root, namespace, name).unlink(missing_ok=True)
    taken_record(root, namespace, name).unlink(missing_ok=True)
    partial.rename(final)
    return final


def discard(partial: Path) -> None:
    shutil.rmtree(partial, ignore_errors=True)


def sweep_partials(root: Path) -> int:
    """Remove every ``.<name>.partial`` under ``root`` (at the agent's start nothing is being written: what
    is there is a killed agent's, and no pod may restore from it). How many went."""
    swept = 0
    for partial in root.glob("*/.*.partial") if root.is_dir() else ():
        if partial.is_dir() and not partial.is_symlink():
            shutil.rmtree(partial, ignore_errors=True)
            swept += 1
    return swept


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def delete(root: Path, namespace: str, name: str) -> tuple[bool, str | None]:
    """Delete one image and the records of a restore from it: (whether there was an image, the failure
    record's text or None). The record is bounded (MAX_FAILURE_BYTES, invalid UTF-8 replaced)."""
    path = image_dir(root, namespace, name)
    record = failure_record(root, namespace, name)
    taken_record(root, namespace, name).unlink(missing_ok=True)
    failure: str | None = None
    try:
        with record.open("rb") as f:
            failure = f.read(MAX_FAILURE_BYTES).decode(errors="replace")
        record.unlink()
    except FileNotFoundError:
        pass
    if not path.exists():
        return False, failure
    shutil.rmtree(path)
    return True, failure


MAX_LISTED = 10_000
"""At most this many images in one listing (the operator's sweep deletes some and asks again later)."""


def listing(root: Path, limit: int = MAX_LISTED) -> list[tuple[str, str]]:
    """The complete images on this node, (namespace, name): never a ``.partial`` being written, nor a
    failed restore's record (dot names are not DNS labels)."""
    found: list[tuple[str, str]] = []
    if not root.is_dir():
        return found
    for namespace in sorted(p for p in root.iterdir() if p.is_dir() and is_valid_checkpoint_name(p.name)):
        for image in sorted(p for p in namespace.iterdir() if p.is_dir() and is_valid_checkpoint_name(p.name)):
            if len(found) >= limit:
                return found
            found.append((namespace.name, image.name))
    return found


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
