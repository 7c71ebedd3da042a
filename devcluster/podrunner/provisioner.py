"""A PersistentVolume provisioner: every PVC of the `standard` class gets a directory on this machine.

The directory outlives the pods that mount it and is removed with the PV once its claim is gone.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

log = logging.getLogger("pod-runner.provisioner")

STORAGE_CLASS = "standard"
PROVISIONER = "devcluster.agentsession.dev/hostpath"
# The operator forks a session's volumes only on a class annotated as able to clone (Kubernetes has
# no field for it); this provisioner clones (dataSource of kind PersistentVolumeClaim).
VOLUME_COPY_ANNOTATION = "agentsession.dev/volume-copy"


def ensure_storage_class(storage: client.StorageV1Api) -> None:
    body = client.V1StorageClass(
        metadata=client.V1ObjectMeta(
            name=STORAGE_CLASS,
            annotations={"storageclass.kubernetes.io/is-default-class": "true", VOLUME_COPY_ANNOTATION: "Clone"},
        ),
        provisioner=PROVISIONER,
        reclaim_policy="Delete",
        volume_binding_mode="Immediate",
        allow_volume_expansion=True,
    )
    try:
        storage.create_storage_class(body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        storage.patch_storage_class(STORAGE_CLASS, {"metadata": {"annotations": body.metadata.annotations}})


def clone_source(pvc: client.V1PersistentVolumeClaim) -> str | None:
    """The name of the PVC this claim clones (spec.dataSource or dataSourceRef of kind PersistentVolumeClaim)."""
    for ref in (pvc.spec.data_source_ref, pvc.spec.data_source):
        if ref is not None and ref.kind == "PersistentVolumeClaim" and not ref.api_group:
            return str(ref.name)
    return None


def copy_volume(source: Path, target: Path) -> None:
    """Copy a volume's directory (files, links, modes) into a new one, atomically by rename."""
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial, symlinks=True)
    # Owners too, as a storage-level clone keeps them: copytree does not, and a non-root runtime could
    # then not write the files it had written in the source.
    for path in [partial, *partial.rglob("*")]:
        try:
            info = (source / path.relative_to(partial)).lstat()
        except FileNotFoundError:  # removed in the source meanwhile: keep the copy's owner
            continue
        os.lchown(path, info.st_uid, info.st_gid)
    partial.rename(target)


class Provisioner:
    def __init__(self, volume_dir: Path) -> None:
        self.core = client.CoreV1Api()
        self.storage = client.StorageV1Api()
        self.volume_dir = volume_dir
        self.stopping = threading.Event()

    def _provision(self, pvc: client.V1PersistentVolumeClaim) -> None:
        if pvc.spec.volume_name or pvc.metadata.deletion_timestamp:
            return
        if not self._ours(pvc.spec.storage_class_name):
            return
        name = f"pvc-{pvc.metadata.uid}"
        path = self.volume_dir / name
        source = clone_source(pvc)
        if source is not None:
            # A clone (dataSource: a PVC of the same namespace): the storage layer copies the volume,
            # as a CSI driver with CLONE_VOLUME does. Until the source is bound, wait (the next listing retries).
            src_dir = self._bound_dir(pvc.metadata.namespace, source)
            if src_dir is None:
                log.info("clone %s/%s waits for its source PVC %s", pvc.metadata.namespace, pvc.metadata.name, source)
                return
            if not path.exists():
                copy_volume(src_dir, path)
        path.mkdir(parents=True, exist_ok=True)
        # World-writable, as local-path-provisioner makes them: a hostPath volume gets no fsGroup, and a
        # pod running as any non-root user must be able to write its own volume.
        path.chmod(0o777)
        requests = (pvc.spec.resources.requests or {}) if pvc.spec.resources else {}
        pv = client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=name, annotations={"pv.kubernetes.io/provisioned-by": PROVISIONER}),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": requests.get("storage", "1Gi")},
                access_modes=pvc.spec.access_modes or ["ReadWriteOnce"],
                persistent_volume_reclaim_policy="Delete",
                storage_class_name=pvc.spec.storage_class_name,
                volume_mode=pvc.spec.volume_mode or "Filesystem",
                host_path=client.V1HostPathVolumeSource(path=str(path), type="Directory"),
                claim_ref=client.V1ObjectReference(
                    namespace=pvc.metadata.namespace, name=pvc.metadata.name, uid=pvc.metadata.uid
                ),
            ),
        )
        try:
            self.core.create_persistent_volume(pv)
            log.info("provisioned %s for %s/%s", name, pvc.metadata.namespace, pvc.metadata.name)
        except ApiException as exc:
            if exc.status != 409:
                log.warning("provisioning %s failed: %s", name, exc.reason)

    def _ours(self, class_name: str | None) -> bool:
        """A class this provisioner serves: `standard`, or any other naming it (tests add classes)."""
        if not class_name or class_name == STORAGE_CLASS:
            return class_name == STORAGE_CLASS
        try:
            return bool(self.storage.read_storage_class(class_name).provisioner == PROVISIONER)
        except ApiException:
            return False

    def _bound_dir(self, namespace: str, name: str) -> Path | None:
        """The directory of a bound PVC this provisioner made (None: absent, unbound or not ours)."""
        try:
            src = self.core.read_namespaced_persistent_volume_claim(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        if not src.spec.volume_name or not self._ours(src.spec.storage_class_name):
            return None
        directory = self.volume_dir / src.spec.volume_name
        return directory if directory.is_dir() else None

    def _reclaim(self, pv: client.V1PersistentVolume) -> None:
        if (pv.metadata.annotations or {}).get("pv.kubernetes.io/provisioned-by") != PROVISIONER:
            return
        if pv.status and pv.status.phase == "Released":
            try:
                self.core.delete_persistent_volume(pv.metadata.name)
            except ApiException as exc:
                if exc.status != 404:
                    log.warning("deleting %s failed: %s", pv.metadata.name, exc.reason)
                    return
            shutil.rmtree(self.volume_dir / pv.metadata.name, ignore_errors=True)

    def _loop(self, list_fn: Any, handle: Any) -> None:
        while not self.stopping.is_set():
            try:
                listing = list_fn()
                for item in listing.items:
                    handle(item)
                for event in watch.Watch().stream(
                    list_fn,
                    resource_version=listing.metadata.resource_version,
                    timeout_seconds=300,
                    _request_timeout=330,
                ):
                    if self.stopping.is_set():
                        return
                    if event["type"] in ("ADDED", "MODIFIED"):
                        handle(event["object"])
            except Exception as exc:
                if self.stopping.is_set():
                    return
                if not (isinstance(exc, ApiException) and exc.status == 410):
                    log.warning("provisioner watch failed: %s", exc)
                    time.sleep(1)

    def start(self) -> None:
        for target, args in (
            (self._loop, (self.core.list_persistent_volume_claim_for_all_namespaces, self._provision)),
            (self._loop, (self.core.list_persistent_volume, self._reclaim)),
        ):
            threading.Thread(target=target, args=args, daemon=True).start()
