"""allow_prefixes and virtual_mode on the real runtime, including symlink escapes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from deepagents.backends.protocol import FileDownloadResponse, FileUploadResponse

from langchain_k8s_client.pod_sandbox import PodSandbox
from testkit.runtime_harness import RuntimeServer


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the scratch area that the policies must keep out of."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "secret.txt").write_text("secret needle\n")
    return directory


@pytest.fixture
def prefixed(runtime_server: RuntimeServer, scratch: Path) -> Iterator[PodSandbox]:
    (scratch / "allowed").mkdir()
    with PodSandbox(runtime_server.endpoint(), sandbox_id="p", allow_prefixes=[f"{scratch}/allowed"]) as backend:
        yield backend


@pytest.fixture
def virtual(runtime_server: RuntimeServer, scratch: Path) -> Iterator[PodSandbox]:
    root = scratch / "root"
    root.mkdir()
    with PodSandbox(runtime_server.endpoint(), sandbox_id="v", virtual_mode=True, root_dir=str(root)) as backend:
        yield backend


def test_allow_prefixes_refuse_writes_outside(prefixed: PodSandbox, scratch: Path) -> None:
    inside, elsewhere = f"{scratch}/allowed/a/b.txt", f"{scratch}/other.txt"
    assert prefixed.upload_files([(inside, b"ok"), (elsewhere, b"no")]) == [
        FileUploadResponse(path=inside, error=None),
        FileUploadResponse(path=elsewhere, error="permission_denied"),
    ]
    assert Path(inside).read_bytes() == b"ok"
    assert not Path(elsewhere).exists()
    assert "permission_denied" in (prefixed.write(elsewhere, "x").error or "")
    assert "permission_denied" in (prefixed.edit(elsewhere, "a", "b").error or "")
    assert "invalid_path" in (prefixed.delete(f"{scratch}/allowed/../other.txt").error or "")
    assert prefixed.upload_files([(f"{scratch}/allowed-but-not/x", b"x")])[0].error == "permission_denied"
    # Reads are not limited by the prefixes.
    assert prefixed.download_files([inside])[0].content == b"ok"


def test_allow_prefixes_refuse_symlink_escapes(prefixed: PodSandbox, scratch: Path, outside: Path) -> None:
    os.symlink(outside, scratch / "allowed" / "link")
    os.symlink(outside / "secret.txt", scratch / "allowed" / "file-link")
    assert prefixed.upload_files([(f"{scratch}/allowed/link/new.txt", b"x")])[0].error == "invalid_path"
    assert prefixed.upload_files([(f"{scratch}/allowed/link/sub/new.txt", b"x")])[0].error == "invalid_path"
    assert prefixed.upload_files([(f"{scratch}/allowed/file-link", b"x")])[0].error == "invalid_path"
    assert "invalid_path" in (prefixed.edit(f"{scratch}/allowed/file-link", "secret", "x").error or "")
    assert "invalid_path" in (prefixed.delete(f"{scratch}/allowed/link/secret.txt").error or "")
    assert not (outside / "new.txt").exists()
    assert not (outside / "sub").exists()
    assert (outside / "secret.txt").read_text() == "secret needle\n"
    # Removing the link itself stays inside: allowed.
    assert prefixed.delete(f"{scratch}/allowed/link").error is None
    assert (outside / "secret.txt").exists()


def test_virtual_mode_maps_paths_both_ways(virtual: PodSandbox, scratch: Path) -> None:
    root = scratch / "root"
    assert virtual.write("/src/app.py", "print('needle')\n").error is None
    assert (root / "src" / "app.py").read_text() == "print('needle')\n"
    entries = virtual.ls("/src").entries or []
    assert [(e["path"], e["is_dir"], e.get("size")) for e in entries] == [("/src/app.py", False, 16)]
    assert virtual.grep("needle").matches == [{"path": "/src/app.py", "line": 1, "text": "print('needle')"}]
    assert [m["path"] for m in virtual.glob("**/*.py").matches or []] == ["/src/app.py"]
    assert virtual.read("/src/app.py").file_data == {"content": "print('needle')", "encoding": "utf-8"}
    assert virtual.edit("/src/app.py", "needle", "pin").occurrences == 1
    assert virtual.download_files(["/src/app.py"])[0].content == b"print('pin')\n"
    assert virtual.execute("pwd; cat src/app.py").output == f"{root}\nprint('pin')\n"
    assert virtual.read("/missing.txt").error == "File '/missing.txt': file_not_found"
    assert virtual.delete("/src").error is None
    assert not (root / "src").exists()
    assert "refusing" in (virtual.delete("/").error or "")


@pytest.mark.parametrize("path", ["/../outside/secret.txt", "/a/../../x", "/~/x", "/~root/.ssh/id_rsa", "relative"])
def test_virtual_mode_rejects_traversal(virtual: PodSandbox, path: str) -> None:
    assert virtual.download_files([path])[0].error == "invalid_path"
    assert virtual.upload_files([(path, b"x")])[0].error == "invalid_path"
    assert "invalid_path" in (virtual.read(path).error or "")
    assert "invalid_path" in (virtual.write(path, "x").error or "")
    assert "invalid_path" in (virtual.ls(path).error or "")


def test_virtual_mode_refuses_symlinks_out_of_the_root(virtual: PodSandbox, scratch: Path, outside: Path) -> None:
    root = scratch / "root"
    os.symlink(outside, root / "escape")
    os.symlink(outside / "secret.txt", root / "secret-link")
    os.symlink("inner.txt", root / "inner-link")
    (root / "inner.txt").write_text("fine")
    assert virtual.download_files(["/escape/secret.txt", "/secret-link", "/inner-link"]) == [
        FileDownloadResponse(path="/escape/secret.txt", content=None, error="invalid_path"),
        FileDownloadResponse(path="/secret-link", content=None, error="invalid_path"),
        FileDownloadResponse(path="/inner-link", content=b"fine", error=None),
    ]
    assert virtual.read("/secret-link").error == "File '/secret-link': invalid_path"
    assert virtual.read("/escape/secret.txt").error == "File '/escape/secret.txt': invalid_path"
    assert virtual.ls("/escape").error == "Path '/escape': invalid_path"
    assert virtual.grep("needle", "/escape").error == "Path '/escape': invalid_path"
    assert virtual.glob("*", "/escape").error == "Path '/escape': invalid_path"
    assert virtual.upload_files([("/escape/new.txt", b"x")])[0].error == "invalid_path"
    assert "invalid_path" in (virtual.edit("/secret-link", "secret", "x").error or "")
    assert virtual.grep("needle").matches == []  # the walk does not follow links out of the root
    assert (outside / "secret.txt").read_text() == "secret needle\n"
    assert not (outside / "new.txt").exists()


def test_virtual_mode_capture_offload_writes_inside_the_root(runtime_server: RuntimeServer, scratch: Path) -> None:
    root = scratch / "root"
    with PodSandbox(
        runtime_server.endpoint(), sandbox_id="v", virtual_mode=True, root_dir=str(root), enable_capture_offload=True
    ) as backend:
        result = backend.execute_with_offload(
            "seq 1 20000", "/large_tool_results/call-1", max_inline_bytes=1000, timeout=30
        )
        assert result.offloaded is True
        assert result.response.exit_code == 0
        assert (root / "large_tool_results" / "call-1").read_text().splitlines()[-1] == "20000"
        page = backend.read("/large_tool_results/call-1", offset=19999, limit=1)
        assert page.file_data is not None and page.file_data["content"] == "20000"
