"""The image builder's pure parts: cache keys, the image table and its names."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from devcluster import images, versions


def test_cache_key_is_stable_and_order_independent() -> None:
    assert images.cache_key({"a": "1", "b": "2"}) == images.cache_key({"b": "2", "a": "1"})
    assert images.cache_key({"a": "1"}) != images.cache_key({"a": "2"})
    assert len(images.cache_key({})) == 16


def test_tree_digest_sees_names_and_contents(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("one")
    first = images.tree_digest(tmp_path, ["x"])
    (tmp_path / "x").write_text("two")
    assert images.tree_digest(tmp_path, ["x"]) != first
    assert images.tree_digest(tmp_path, ["x", "missing"]) != images.tree_digest(tmp_path, ["x"])


def test_key_changes_with_a_base(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(images, "_operator_inputs", lambda: {"sources": "s"})
    operator = images.Image("op", ("x/op:1",), lambda: {"sources": "s"}, images._build_operator, bases=("base-t",))
    base = images.Image("base-t", ("x/base:1",), lambda: {"suite": "bookworm"}, images._build_base)
    monkeypatch.setitem(images.IMAGES, "base-t", base)
    before = operator.key()
    monkeypatch.setitem(
        images.IMAGES,
        "base-t",
        images.Image("base-t", ("x/base:1",), lambda: {"suite": "trixie"}, images._build_base),
    )
    assert operator.key() != before


def test_base_inputs_include_the_suite_and_packages() -> None:
    bookworm = images._base_inputs("bookworm")()
    assert bookworm["suite"] == "bookworm"
    assert "python3" in bookworm["packages"].split()
    assert images._base_inputs("trixie")() != bookworm


def test_image_names_match_what_manifests_use() -> None:
    assert images.BASE.refs == ("docker.io/library/python:3.11-slim-bookworm",)
    assert images.OPERATOR.refs == ("ghcr.io/agentsession/operator:0.1.0",)
    runtime = f"registry.k8s.io/agent-sandbox/python-runtime-sandbox:{versions.AGENT_SANDBOX}"
    assert images.PYTHON_RUNTIME.refs == (runtime,)
    assert {f"registry.k8s.io/pause:{tag}" for tag in ("3.10", "3.10.2")} <= set(images.PAUSE.refs)
    assert "registry.k8s.io/agent-sandbox/sandbox-router-go:latest" in images.SANDBOX_ROUTER.refs
    assert set(images.SERVED) <= set(images.IMAGES)
    assert images.BASE.name not in images.SERVED


def test_manifest_images_are_served() -> None:
    """Every image config/ and the shared manifests (testkit/manifests.py) name is one the local registry serves."""
    root = Path(__file__).resolve().parents[3]
    served = {ref for name in images.SERVED for ref in images.IMAGES[name].refs}
    texts = [p.read_text() for p in [*root.glob("config/**/*.yaml"), root / "testkit" / "manifests.py"]]
    for text in texts:
        for line in text.splitlines():
            for token in line.replace('"', " ").split():
                if token.startswith(("registry.k8s.io/", "ghcr.io/agentsession/")):
                    assert token in served, f"{token} is not served by the local registry"


def test_write_tar_is_reproducible(tmp_path: Path) -> None:
    entries: dict[str, tuple[bytes | Path | None, int]] = {"tmp": (None, 0o1777), "etc/passwd": (b"x", 0o644)}
    first = images.write_tar(tmp_path / "a.tar", entries).read_bytes()
    assert images.write_tar(tmp_path / "b.tar", entries).read_bytes() == first
    with tarfile.open(tmp_path / "a.tar") as tar:
        assert tar.getmember("tmp").mode == 0o1777
        assert tar.getmember("tmp").isdir()


def _editing_builder(edits: list[str]):  # type: ignore[no-untyped-def]
    """A builder whose run edits the image's sources (as a user saving a file mid-build) while edits last."""

    def build(image: images.Image, work: Path, log: Path) -> None:
        if edits:
            edits.pop(0)

    return build


def test_sources_edited_during_a_build_are_built_again(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`make demo` while saving a file: the first build's key moved, and the push then found no archive
    (FileNotFoundError on push.log). The image is built again until it matches the sources, or a clear error."""
    monkeypatch.setenv("DEVCLUSTER_CACHE", str(tmp_path))
    monkeypatch.setattr(images.prereqs, "ensure", lambda *a, **k: None)
    monkeypatch.setattr(images, "_buildah", lambda args, log: Path(args[-1].split(":", 1)[1]).write_bytes(b"oci"))
    edits = ["saved once"]
    image = images.Image(
        "t", ("x/t:1",), lambda: {"sources": str(len(edits))}, _editing_builder(edits), keep_in_storage=True
    )
    assert images.build_image(image) is not None
    assert image.is_built() and image.archive().read_bytes() == b"oci"

    always = ["edit"] * 10
    restless = images.Image(
        "r", ("x/r:1",), lambda: {"sources": str(len(always))}, _editing_builder(always), keep_in_storage=True
    )
    with pytest.raises(images.ImageError, match="kept changing during 3 builds"):
        images.build_image(restless)
    assert len(always) == 10 - images.BUILD_TRIES
