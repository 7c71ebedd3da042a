"""The dev cluster's volume provisioner clones a PVC named by dataSource (no cluster)."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client

from devcluster.podrunner.provisioner import clone_source, copy_volume


def pvc(**spec: object) -> client.V1PersistentVolumeClaim:
    return client.V1PersistentVolumeClaim(spec=client.V1PersistentVolumeClaimSpec(**spec))


def test_clone_source_from_data_source_or_ref() -> None:
    ref = client.V1TypedLocalObjectReference(kind="PersistentVolumeClaim", name="src")
    assert clone_source(pvc(data_source=ref)) == "src"
    assert (
        clone_source(pvc(data_source_ref=client.V1TypedObjectReference(kind="PersistentVolumeClaim", name="a"))) == "a"
    )
    snap = client.V1TypedLocalObjectReference(kind="VolumeSnapshot", name="s", api_group="snapshot.storage.k8s.io")
    assert clone_source(pvc(data_source=snap)) is None and clone_source(pvc()) is None


def test_copy_volume_is_a_separate_copy(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f").write_text("one")
    (src / "link").symlink_to("d/f")
    copy_volume(src, tmp_path / "dst")
    assert (tmp_path / "dst" / "d" / "f").read_text() == "one" and (tmp_path / "dst" / "link").is_symlink()
    (tmp_path / "dst" / "d" / "f").write_text("two")
    assert (src / "d" / "f").read_text() == "one"
    assert not (tmp_path / "dst.partial").exists()
