"""The local image registry a real node pulls from, and containerd's mirror configuration for it.

The distribution registry (built from its Go module, cached like the control plane) listens on
127.0.0.1 only, with filesystem storage in a directory the caller owns. containerd is told, per
upstream registry name, to pull from it over plain HTTP and never from the real registry: an image
``registry.k8s.io/agent-sandbox/python-runtime-sandbox:TAG`` is served as
``<local>/agent-sandbox/python-runtime-sandbox:TAG`` (the upstream host dropped, the path kept).
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from devcluster import build, ports
from devcluster.errors import DevclusterError

# The registries our manifests and the upstream images name. `_default` catches every other
# registry too, so a pull of an unexpected image fails here instead of leaving the machine.
UPSTREAM_REGISTRIES = ("registry.k8s.io", "ghcr.io", "docker.io", "_default")


class RegistryError(DevclusterError):
    pass


def split_reference(ref: str) -> tuple[str, str, str]:
    """``registry.k8s.io/pause:3.10`` -> (``registry.k8s.io``, ``pause``, ``3.10``).

    Follows the Docker reference rules: the first component is a registry host only if it has a dot
    or a colon or is ``localhost``; otherwise the registry is docker.io, with ``library/`` for
    single-name images. A missing tag is ``latest``.
    """
    name, _, digest = ref.partition("@")
    if digest:
        raise ValueError(f"{ref}: digest references are not served by the local registry")
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = "docker.io", name
    if host == "docker.io" and "/" not in path.rsplit(":", 1)[0]:
        path = "library/" + path
    repo, tag = path, "latest"
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = path.rsplit(":", 1)
    return host, repo, tag


def local_reference(ref: str, registry: str) -> str:
    """Where the local registry ``registry`` (``127.0.0.1:PORT``) serves the upstream image ``ref``."""
    _, repo, tag = split_reference(ref)
    return f"{registry}/{repo}:{tag}"


def containerd_registry_hosts(registry: str) -> dict[str, str]:
    """containerd 2.x ``hosts.toml`` files, keyed by their path below the ``config_path`` directory.

    Write each as ``<config_path>/<key>`` with the CRI plugin's
    ``[plugins."io.containerd.cri.v1.images".registry] config_path = "<config_path>"``.
    ``server`` is the local registry too, so a missing image fails instead of falling back to the
    real registry (traffic stays on this machine).
    """
    local = f"http://{registry}"
    files = {}
    for upstream in UPSTREAM_REGISTRIES:
        files[f"{upstream}/hosts.toml"] = (
            f"# {upstream}: served by the devcluster's local registry over plain HTTP; no fallback.\n"
            f'server = "{local}"\n'
            "\n"
            f'[host."{local}"]\n'
            '  capabilities = ["pull", "resolve"]\n'
        )
    return files


def write_containerd_hosts(config_path: Path, registry: str) -> None:
    """Write :func:`containerd_registry_hosts` into containerd's ``config_path`` directory."""
    for rel, text in containerd_registry_hosts(registry).items():
        path = config_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def registry_binary() -> Path:
    build.build(build.DISTRIBUTION)
    return build.DISTRIBUTION.path("registry")


def config_yaml(storage: Path, address: str) -> str:
    return (
        "version: 0.1\n"
        "log:\n"
        "  level: warn\n"
        "  accesslog:\n"
        "    disabled: true\n"
        "storage:\n"
        "  filesystem:\n"
        f"    rootdirectory: {storage}\n"
        "  delete:\n"
        "    enabled: true\n"
        "http:\n"
        f"  addr: {address}\n"
    )


def free_port() -> int:
    return ports.free_port()


@dataclass
class Registry:
    """A running local registry: ``address`` is ``127.0.0.1:PORT``."""

    address: str
    storage: Path
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(storage: Path, port: int = 0, timeout: float = 30.0) -> Registry:
    """Start the registry on 127.0.0.1:``port`` (0: a free one) storing blobs in ``storage``.

    Returns once ``/v2/`` answers. The caller stops it (``stop()`` or a ``with`` block).
    """
    storage = storage.resolve()
    storage.mkdir(parents=True, exist_ok=True)
    address = f"127.0.0.1:{port or free_port()}"
    config = storage / "registry-config.yml"
    config.write_text(config_yaml(storage / "data", address))
    log = storage / "registry.log"
    env = dict(os.environ)
    # The registry exports OpenTelemetry traces to localhost:4318 unless told not to.
    env["OTEL_TRACES_EXPORTER"] = "none"
    env["OTEL_SDK_DISABLED"] = "true"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [str(registry_binary()), "serve", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    registry = Registry(address, storage, process, log)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            tail = log.read_text(errors="replace").splitlines()[-10:]
            raise RegistryError(f"registry exited ({process.returncode}); log {log}:\n" + "\n".join(tail))
        try:
            with urllib.request.urlopen(f"{registry.url}/v2/", timeout=2) as resp:
                if resp.status == 200:
                    return registry
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            registry.stop()
            raise RegistryError(f"registry on {address} did not answer /v2/ within {timeout:.0f} s; log {log}")
        time.sleep(0.1)
