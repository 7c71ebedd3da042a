"""The dev cluster's volume provisioner clones a PVC named by dataSource (what a fork's volumes need)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.e2e.conftest import Kube

pytestmark = [pytest.mark.e2e, pytest.mark.kwoknode(reason="reads the provisioner's directories on this host")]


def _pvc(name: str, source: str | None = None) -> dict[str, object]:
    spec: dict[str, object] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if source:
        spec["dataSource"] = {"kind": "PersistentVolumeClaim", "name": source}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}


def _bound_dir(kube: Kube, namespace: str, name: str) -> Path:
    def bound() -> str | None:
        pvc = kube.get("pvc", name, namespace) or {}
        return (pvc.get("spec") or {}).get("volumeName")

    volume = kube.wait_for(f"{name} bound", bound, timeout=60)
    pv = kube.get("pv", volume) or {}
    return Path(pv["spec"]["hostPath"]["path"])


def test_a_clone_starts_as_a_copy_and_then_diverges(kube: Kube, namespace: str) -> None:
    kube.apply(_pvc("source"), namespace=namespace)
    source = _bound_dir(kube, namespace, "source")
    (source / "notes.txt").write_text("written in the source\n")
    os.chown(source / "notes.txt", 1000, 1000)  # as a non-root runtime writes it
    kube.apply(_pvc("fork", source="source"), namespace=namespace)
    fork = _bound_dir(kube, namespace, "fork")
    assert fork != source and (fork / "notes.txt").read_text() == "written in the source\n"
    info = (fork / "notes.txt").stat()
    assert (info.st_uid, info.st_gid) == (1000, 1000)  # owners kept, as a storage-level clone keeps them
    (fork / "notes.txt").write_text("changed in the fork\n")
    (source / "later.txt").write_text("after the fork\n")
    assert (source / "notes.txt").read_text() == "written in the source\n"
    assert not (fork / "later.txt").exists()
