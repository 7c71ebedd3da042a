"""A pod the kubelet creates comes up restored from a gVisor checkpoint (issue 33's groundwork).

The kubelet and CRI have no restore call; devcluster's gVisor shim has one (devcluster/gvisor/restoreext):
a pod annotated ``agentsession.dev/restore-from: <name>`` restores every container from the checkpoint
``<name>`` stored for the pod's own namespace on the node, instead of starting them. Here the checkpoint is
taken with the node's runsc, as a node agent would take it (then the agent's sha256 manifest of the image);
the restored pod is a new pod (new UID, new IP). A restore that cannot work (no image, a corrupt one, another
namespace's) starts the pod fresh and leaves the shim's record of why, which the node agent reports.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentsession_nodeagent import images
from devcluster import build
from devcluster.cluster import Cluster
from devcluster.realnode.configs import RESTORE_ANNOTATION, NodeDirs
from testkit import manifests
from tests.e2e.conftest import Kube

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

# A python process holding a value only in its memory (printed once a second), a background sleep, and a
# file in the container's root filesystem (gVisor keeps the overlay's upper layer in the sandbox's memory).
WORKLOAD = (
    "echo {token} > /tmp/rootfs-marker; sleep 100000 & "
    'python3 -u -c \'import time\nvalue = "{token}"\ncount = 0\n'
    "while True:\n  count += 1; print(value, count, flush=True); time.sleep(1)'"
)


def _pod(name: str, token: str, restore_from: str | None = None, restart: str = "Never") -> dict[str, Any]:
    annotations = {RESTORE_ANNOTATION: restore_from} if restore_from else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "runtimeClassName": manifests.GVISOR,
            "restartPolicy": restart,
            "containers": [
                {
                    "name": "main",
                    "image": manifests.PYTHON_RUNTIME_IMAGE,
                    "command": ["sh", "-c", WORKLOAD.format(token=token)],
                }
            ],
        },
    }


def _sandbox_id(cluster: Cluster, pod_uid: str) -> str:
    """The runsc id of the pod's sandbox (its pause container): the checkpoint of the pod is its checkpoint."""
    state = NodeDirs(cluster.paths.root / "node").containerd / "state" / "io.containerd.runtime.v2.task" / "k8s.io"
    for spec in state.glob("*/config.json"):
        notes = json.loads(spec.read_text()).get("annotations") or {}
        if notes.get("io.kubernetes.cri.sandbox-uid") == pod_uid and notes.get("io.kubernetes.cri.container-type") == (
            "sandbox"
        ):
            return spec.parent.name
    raise AssertionError(f"no gVisor sandbox of pod {pod_uid} under {state}")


def _logs(kube: Kube, name: str, namespace: str) -> list[str]:
    """The workload's "<value> <count>" lines ([] before it has any; kubectl may print the kubelet's "failed
    to try resolving symlinks" for a log file not there yet)."""
    proc = kube.run("logs", name, "-n", namespace, check=False)
    return [line for line in proc.stdout.splitlines() if re.fullmatch(r"\S+ \d+", line)]


def _settled_logs(kube: Kube, name: str, namespace: str) -> list[str]:
    """The log of a stopped process once it has all reached the file (under load the copy lags the
    process by seconds: a read right after the checkpoint missed its last 8 lines)."""
    seen: list[list[str]] = [_logs(kube, name, namespace)]

    def settled() -> bool:
        time.sleep(2)
        seen.append(_logs(kube, name, namespace))
        return seen[-1] == seen[-2]

    kube.wait_for("the stopped process's log to settle", settled, timeout=30)
    return seen[-1]


def _ready(kube: Kube, name: str, namespace: str) -> bool:
    return kube.is_true(kube.get("pod", name, namespace), "Ready")


@pytest.fixture(scope="module")
def namespace(kube: Kube) -> Iterator[str]:
    name = f"restore-{uuid.uuid4().hex[:6]}"
    kube.run("create", "namespace", name)
    yield name
    kube.run("delete", "namespace", name, "--wait=false", check=False)


def _checkpoint(kube: Kube, cluster: Cluster, namespace: str, pod: str, restore_into: str) -> tuple[str, str, int]:
    """A running pod checkpointed (it stops) and deleted, as the node agent would for a hibernation whose
    wake creates pod ``restore_into``: (checkpoint name, the value in memory, last count)."""
    token = secrets.token_hex(8)
    kube.apply(_pod(pod, token), namespace=namespace)
    kube.wait_for("the pod to print its value", lambda: len(_logs(kube, pod, namespace)) >= 3, timeout=120)
    found = kube.get("pod", pod, namespace)
    assert found is not None
    name = f"ck-{uuid.uuid4().hex[:6]}"
    image = NodeDirs(cluster.paths.root / "node").checkpoints / namespace / name
    image.mkdir(parents=True)
    root = NodeDirs(cluster.paths.root / "node").runsc_root / "k8s.io"
    sandbox = _sandbox_id(cluster, found["metadata"]["uid"])
    runsc = [str(build.GVISOR.path("runsc")), f"--root={root}", "checkpoint", f"--image-path={image}", sandbox]
    proc = subprocess.run(runsc, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    images.write_target(image, restore_into)  # the one pod it restores into, as the agent names it
    images.write_manifest(image)  # as the node agent does before it publishes an image
    last = int(_settled_logs(kube, pod, namespace)[-1].split()[1])
    kube.run("delete", "pod", pod, "-n", namespace, "--wait=true", "--timeout=60s")
    return name, token, last


@pytest.fixture(scope="module")
def checkpoint(kube: Kube, cluster: Cluster, namespace: str) -> tuple[str, str, int]:
    """The image of pod "before", for pod "after"."""
    return _checkpoint(kube, cluster, namespace, "before", "after")


def test_a_pod_the_image_does_not_name_restores_nothing(
    kube: Kube, cluster: Cluster, namespace: str, checkpoint: tuple[str, str, int]
) -> None:
    """Issue 49 item 1, in depth: an image restores into the one pod its node agent named (the pod the
    session's wake creates, written into the image under its manifest). Another pod of the same namespace
    naming it, past the API server's pins (an admin's pod here; a tenant's where the admission policies are
    missing), starts fresh and spoils nothing: the named pod still restores from it afterwards."""
    name, token, _ = checkpoint
    fresh = f"fresh-{secrets.token_hex(4)}"
    kube.apply(_pod("namesake", fresh, restore_from=name), namespace=namespace)
    _starts_fresh(kube, "namesake", namespace, fresh)
    assert not any(token in line for line in _logs(kube, "namesake", namespace))
    assert not images.failure_record(_checkpoints(cluster), namespace, name).exists()
    kube.run("delete", "pod", "namesake", "-n", namespace, "--wait=false")


def test_a_new_pod_comes_up_restored_from_the_checkpoint(
    kube: Kube, namespace: str, checkpoint: tuple[str, str, int]
) -> None:
    name, token, last = checkpoint
    # A different value in the restored pod's own command: what it prints can only come from the image.
    kube.apply(_pod("after", "never-run", restore_from=name), namespace=namespace)
    kube.wait_for("the restored pod Ready", lambda: _ready(kube, "after", namespace), timeout=120)
    lines = kube.wait_for("the restored process to print", lambda: _logs(kube, "after", namespace), timeout=30)
    first = lines[0].split()
    # The same process: its value, and its count going on from where the checkpoint stopped it.
    assert first[0] == token and int(first[1]) == last + 1, (first, last)
    procs = kube.run("exec", "after", "-n", namespace, "--", "sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    assert "sleep 100000" in procs.stdout, procs.stdout
    marker = kube.run("exec", "after", "-n", namespace, "--", "cat", "/tmp/rootfs-marker")
    assert marker.stdout.strip() == token
    # The new pod's own address is the restored sandbox's (gVisor's netstack takes the new namespace's).
    pod = kube.get("pod", "after", namespace)
    assert pod is not None
    addr = kube.run(
        "exec", "after", "-n", namespace, "--", "python3", "-c",
        "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('10.96.0.1', 443)); "
        "print(s.getsockname()[0])",
    )  # fmt: skip
    assert addr.stdout.strip() == pod["status"]["podIP"]
    # Still running, not a replay of the image's state: its counter goes on past the checkpoint's.
    kube.wait_for(
        "the restored counter to go on",
        lambda: int(_logs(kube, "after", namespace)[-1].split()[1]) > last + 1,
        timeout=30,
        interval=0.5,
    )


def _checkpoints(cluster: Cluster) -> Path:
    return NodeDirs(cluster.paths.root / "node").checkpoints


def _starts_fresh(kube: Kube, pod: str, namespace: str, token: str) -> float:
    """The pod Ready and its workload a fresh one: its own value, which only its own command prints (a
    restored process prints the image's). Seconds to Ready."""
    started = time.monotonic()
    kube.wait_for("the pod Ready (a fresh start)", lambda: _ready(kube, pod, namespace), timeout=90)
    ready = time.monotonic() - started
    lines = kube.wait_for("the pod's own workload to print", lambda: _logs(kube, pod, namespace), timeout=30)
    assert {line.split()[0] for line in lines} == {token}, lines
    return ready


def _record(cluster: Cluster, namespace: str, name: str) -> str:
    path = images.failure_record(_checkpoints(cluster), namespace, name)
    assert path.is_file(), f"no record of the failed restore at {path}"
    assert path.stat().st_mode & 0o777 == 0o600
    text = path.read_text()
    assert len(text) <= images.MAX_FAILURE_BYTES
    return text


@pytest.mark.parametrize(
    "restore_from",
    [
        "{name}",  # the name of a checkpoint another namespace has
        "../{namespace}/{name}",  # a path out of the pod's own namespace
    ],
    ids=["other-namespace", "path"],
)
def test_a_pod_cannot_restore_another_namespaces_checkpoint(
    kube: Kube, cluster: Cluster, namespace: str, checkpoint: tuple[str, str, int], restore_from: str
) -> None:
    """The image holds the first namespace's memory: a pod elsewhere that names it must not get it. It
    starts fresh (its own workload), as a pod whose image is missing."""
    name, token, _ = checkpoint
    other = f"thief-{uuid.uuid4().hex[:6]}"
    kube.run("create", "namespace", other)
    try:
        wanted = restore_from.format(name=name, namespace=namespace)
        kube.apply(_pod("thief", "x", restore_from=wanted), namespace=other)
        _starts_fresh(kube, "thief", other, "x")
        assert not any(token in line for line in _logs(kube, "thief", other))
        if "/" not in wanted:  # a name: recorded under the pod's own namespace (a path has no safe record)
            assert "no checkpoint image" in _record(cluster, other, name)
    finally:
        kube.run("delete", "namespace", other, "--wait=false", check=False)


def _garble(path: Path, at: int) -> None:
    with path.open("r+b") as f:
        f.seek(at)
        data = f.read(4096)
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in data))


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        ("missing", "no checkpoint image"),
        ("corrupt-pages", "pages.img is corrupt"),  # runsc would load it lazily, after the pod is up
        ("no-manifest", "no integrity manifest"),
        ("no-target", "names no pod to restore into"),  # an older node agent's image
    ],
)
def test_a_restore_that_cannot_work_starts_the_pod_fresh(
    kube: Kube, cluster: Cluster, namespace: str, checkpoint: tuple[str, str, int], damage: str, why: str
) -> None:
    """Issue 33: a restore that fails never loses the workspace. The image is never handed to runsc: the
    pod starts as a plain pod would, and the shim's record says why (the node agent reports it)."""
    good, token, _ = checkpoint
    name = f"{damage}-{uuid.uuid4().hex[:6]}"
    root = _checkpoints(cluster)
    if damage != "missing":
        shutil.copytree(root / namespace / good, root / namespace / name)
    if damage == "corrupt-pages":
        _garble(root / namespace / name / "pages.img", (root / namespace / name / "pages.img").stat().st_size // 2)
    if damage == "no-manifest":
        (root / namespace / name / images.MANIFEST).unlink()
    if damage == "no-target":
        (root / namespace / name / images.TARGET).unlink()
        images.write_manifest(root / namespace / name)
    pod = f"fresh-{damage}"
    fresh = f"fresh-{secrets.token_hex(4)}"
    kube.apply(_pod(pod, fresh, restore_from=name), namespace=namespace)
    _starts_fresh(kube, pod, namespace, fresh)
    assert not any(token in line for line in _logs(kube, pod, namespace))
    assert why in _record(cluster, namespace, name)
    # The node agent's delete answers the record (and deletes it with the image).
    deleted, failure = images.delete(root, namespace, name)
    assert deleted == (damage != "missing") and failure is not None and why in failure
    assert not images.failure_record(root, namespace, name).exists()
    kube.run("delete", "pod", pod, "-n", namespace, "--wait=false")


def test_the_checkpoint_is_below_the_namespaces_directory(cluster: Cluster, namespace: str) -> None:
    """Only root reads checkpoints (they hold memory, secrets included): the root directory is 0700."""
    root = NodeDirs(cluster.paths.root / "node").checkpoints
    assert Path(root).stat().st_mode & 0o777 == 0o700
    assert (root / namespace).is_dir()


def _kill_sandbox(cluster: Cluster, pod_uid: str) -> str:
    """SIGKILL the pod's gVisor sandbox process (the Sentry), as the kernel's OOM killer ends one whose
    memory a hog exhausted: every container of the pod dies with it. The sandbox's id."""
    sandbox = _sandbox_id(cluster, pod_uid)
    killed = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"runsc-sandbox") and sandbox.encode() in argv:
            os.kill(int(cmdline.parent.name), signal.SIGKILL)
            killed.append(cmdline.parent.name)
    assert killed, f"no runsc-sandbox process of sandbox {sandbox}"
    return sandbox


def test_a_restored_pods_next_sandbox_starts_fresh(kube: Kube, cluster: Cluster, namespace: str) -> None:
    """Issue 49 item 1: the kubelet builds a pod's next sandbox (after the last one died: a memory hog, a
    crash) from the pod's current annotations. Only a pod's first sandbox restores: the next one starts
    fresh, never the image's memory again (into whatever the pod carries by then)."""
    name, token, _ = _checkpoint(kube, cluster, namespace, "crash-before", "crash-after")
    fresh = f"fresh-{secrets.token_hex(4)}"
    kube.apply(_pod("crash-after", fresh, restore_from=name, restart="Always"), namespace=namespace)
    kube.wait_for("the restored pod Ready", lambda: _ready(kube, "crash-after", namespace), timeout=120)
    lines = kube.wait_for("the restored process to print", lambda: _logs(kube, "crash-after", namespace), timeout=30)
    assert lines[0].split()[0] == token, lines  # restored: the image's value
    pod = kube.get("pod", "crash-after", namespace)
    assert pod is not None
    _kill_sandbox(cluster, pod["metadata"]["uid"])

    def restarted() -> bool:
        found = kube.get("pod", "crash-after", namespace)
        statuses = ((found or {}).get("status") or {}).get("containerStatuses") or []
        return bool(statuses) and statuses[0].get("restartCount", 0) >= 1 and _ready(kube, "crash-after", namespace)

    kube.wait_for("the pod restarted in a new sandbox", restarted, timeout=120)
    lines = kube.wait_for("the new container to print", lambda: _logs(kube, "crash-after", namespace), timeout=30)
    assert {line.split()[0] for line in lines} == {fresh}, lines
    kube.run("delete", "pod", "crash-after", "-n", namespace, "--wait=false")
