"""The real node's images: built (cached), pushed into a local registry, and the runtime really runs.

Select with ``-m images``. Needs root (buildah, mmdebstrap) and the host packages of
``devcluster.prereqs.IMAGES``; the first run builds every image (minutes), later runs use the cache.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster import images, prereqs, registry

pytestmark = [
    pytest.mark.images,
    pytest.mark.skipif(os.geteuid() != 0, reason="image builds need root"),
    pytest.mark.skipif(bool(prereqs.missing([prereqs.IMAGES])), reason="host packages for images missing"),
]

MANIFEST_TYPES = "application/vnd.oci.image.manifest.v1+json,application/vnd.docker.distribution.manifest.v2+json"


@pytest.fixture(scope="module")
def local_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[registry.Registry]:
    with registry.start(tmp_path_factory.mktemp("registry")) as running:
        yield running


def test_every_served_image_is_pushed_and_answers_its_manifest(local_registry: registry.Registry) -> None:
    images.build_all()
    pushed = images.push_all(local_registry.address)
    for name in images.SERVED:
        for ref in images.IMAGES[name].refs:
            assert registry.local_reference(ref, local_registry.address) in pushed
            _, repo, tag = registry.split_reference(ref)
            request = urllib.request.Request(
                f"{local_registry.url}/v2/{repo}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES}
            )
            with urllib.request.urlopen(request, timeout=10) as resp:
                manifest = json.loads(resp.read())
            assert manifest["config"]["digest"].startswith("sha256:"), ref
            assert manifest["layers"], ref


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def test_python_runtime_image_serves_execute(tmp_path: Path) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bwrap missing")
    images.build_image(images.PYTHON_RUNTIME)
    rootfs = tmp_path / "rootfs"
    config = images.unpack(images.PYTHON_RUNTIME.archive(), rootfs)
    assert config["User"] == "1000"
    cmd = list(config["Cmd"])
    assert cmd[:2] == ["uvicorn", "main:app"]
    # The image's own command, bound to a loopback address instead of 0.0.0.0.
    host = "127.0.0.9"
    port = _free_port(host)
    cmd[cmd.index("--host") + 1] = host
    cmd[cmd.index("--port") + 1] = str(port)
    env = [arg for item in config.get("Env", []) for arg in ("--setenv", *item.split("=", 1))]
    argv = [
        "bwrap",
        "--ro-bind", str(rootfs), "/",
        "--proc", "/proc",
        "--dev", "/dev",
        "--tmpfs", "/tmp",
        "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent",
        "--clearenv", *env,
        "--chdir", config.get("WorkingDir") or "/",
        "--", "setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", *cmd,
    ]  # fmt: skip
    log = (tmp_path / "runtime.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://{host}:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "runtime.log").read_text()
            try:
                with urllib.request.urlopen(url + "/", timeout=2) as resp:
                    assert resp.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline, "runtime did not answer GET /"
                time.sleep(0.3)
        request = urllib.request.Request(
            url + "/execute",
            data=json.dumps({"command": "sh -c 'echo hi; id -u'"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            result = json.loads(resp.read())
        assert result["exit_code"] == 0, result
        assert result["stdout"].split() == ["hi", "1000"]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
