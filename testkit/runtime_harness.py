"""Start the real upstream python runtime as a local process on a 127.x address.

Used by the integration tests and by `benchmarks/bench_transport.py`. The runtime
runs from its directory in the Go module cache (read-only, never copied) with
the venv's python; every wait is bounded and the process group is always stopped.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from devcluster import build, versions
from devcluster.build import BuildError
from langchain_k8s_client.transport import PodEndpoint

RUNTIME_ENV = "AGENT_SANDBOX_RUNTIME_DIR"
PORT = 8888
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0


@dataclass(frozen=True)
class RuntimeServer:
    url: str
    base_dir: Path
    hostname: str
    pid: int
    log: Path

    def endpoint(self, *, expected_hostname: str | None = "") -> PodEndpoint:
        """Endpoint of this runtime; by default it expects the pod name it was started with."""
        expected = self.hostname if expected_hostname == "" else expected_hostname
        return PodEndpoint(self.url, expected_hostname=expected)


@functools.cache
def runtime_dir() -> Path:
    """The upstream runtime's directory: $AGENT_SANDBOX_RUNTIME_DIR, else the pinned agent-sandbox module
    in this machine's Go module cache (`go mod download`, as devcluster's build gets it, wherever
    GOMODCACHE points)."""
    if os.environ.get(RUNTIME_ENV):
        return Path(os.environ[RUNTIME_ENV])
    return build.module_dir("sigs.k8s.io/agent-sandbox", versions.AGENT_SANDBOX) / "examples" / "python-runtime-sandbox"


def runtime_missing() -> str | None:
    """None when the runtime can start here, else why not and what to do."""
    try:
        main = runtime_dir() / "main.py"
    except (BuildError, OSError) as exc:  # no Go, or the download failed
        return f"upstream python runtime not found: {exc} (or set {RUNTIME_ENV})"
    return None if main.is_file() else f"upstream python runtime not found: no {main} (set {RUNTIME_ENV})"


def free_loopback_address() -> str:
    """A random 127.a.b.c whose port 8888 is free (any 127/8 address works on Linux)."""
    for _ in range(100):
        address = f"127.{random.randint(10, 250)}.{random.randint(0, 255)}.{random.randint(2, 254)}"
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((address, PORT))
            except OSError:
                continue
        return address
    raise RuntimeError("no free loopback address found")


def _tool_dir(root: Path) -> Path:
    # `python`/`python3` straight to an interpreter, as a pod image has them (the
    # host's pyenv shims cost ~0.25 s per start and would dominate every helper).
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    target = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    for name in ("python", "python3"):
        link = bin_dir / name
        if not link.exists():
            link.symlink_to(target)
    return bin_dir


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    with httpx.Client(trust_env=False, timeout=2.0) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"runtime exited with {proc.returncode}: {log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url + "/").status_code == 200:
                    return
            time.sleep(0.1)
    raise RuntimeError(f"runtime not healthy after {START_TIMEOUT}s: {log.read_text()[-2000:]}")


def stop_process_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the group we started, then SIGKILL after a bounded wait."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(STOP_TIMEOUT)


@contextlib.contextmanager
def runtime_process(
    workdir: Path, hostname: str, *, extra_env: dict[str, str] | None = None
) -> Iterator[RuntimeServer]:
    """Run the runtime with SANDBOX_BASE_DIR=workdir/base and HOSTNAME=hostname."""
    base_dir = workdir / "base"
    base_dir.mkdir(parents=True, exist_ok=True)
    log = workdir / "runtime.log"
    address = free_loopback_address()
    env = {
        **os.environ,
        "SANDBOX_BASE_DIR": str(base_dir),
        "HOSTNAME": hostname,
        "PATH": f"{_tool_dir(workdir)}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        **(extra_env or {}),
    }
    with log.open("wb") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "main:app",
                "--host",
                address,
                "--port",
                str(PORT),
                "--log-level",
                "warning",
            ],
            cwd=runtime_dir(),
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://{address}:{PORT}"
    try:
        _wait_healthy(url, proc, log)
        yield RuntimeServer(url=url, base_dir=base_dir, hostname=hostname, pid=proc.pid, log=log)
    finally:
        stop_process_group(proc)
