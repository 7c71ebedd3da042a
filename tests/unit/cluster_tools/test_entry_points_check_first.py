"""Every way a user starts or builds a cluster checks the host packages first (issue 27).

Each entry point runs as the user would start it, with ``bwrap`` hidden (a PATH of every host command but
that one) and as a non-root user (so nothing gets installed): it must stop within 60 s, before any build,
with one line that names the package, and no traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
NOBODY = 65534
ENTRY_POINTS = {
    "make demo": ["-m", "examples.demo_agent"],
    "make dev": ["-m", "examples.demo_agent", "--keep"],
    "make cluster-up": ["-m", "devcluster", "up"],
    "make test's build": ["-m", "devcluster", "build"],
    "python -m devcluster.build": ["-m", "devcluster.build"],
    "make install": ["-m", "devcluster", "install"],
    "make bench (its first benchmark builds and starts clusters)": ["-m", "benchmarks.bench_cluster", "--node", "kwok"],
}


def path_without(command: str, farm: Path) -> str:
    """A PATH holding every command of today's PATH but ``command`` (symlinks in ``farm``)."""
    farm.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            if entry.name != command and not os.path.lexists(farm / entry.name):
                (farm / entry.name).symlink_to(entry.path)
    return str(farm)


@pytest.mark.parametrize("entry", ENTRY_POINTS.values(), ids=list(ENTRY_POINTS))
def test_a_missing_bubblewrap_stops_at_once_in_one_line(entry: list[str], tmp_path: Path) -> None:
    tmp_path.chmod(0o777)  # the unprivileged user writes its state and cache here
    env = {
        "PATH": path_without("bwrap", tmp_path / "bin"),
        "HOME": str(tmp_path),
        "DEVCLUSTER_DIR": str(tmp_path / "cluster"),
        "DEVCLUSTER_CACHE": str(tmp_path / "cache"),
        "DEVCLUSTER_NODE": "kwok",
        "LANG": "C.UTF-8",
    }
    assert shutil.which("bwrap", path=env["PATH"]) is None
    command = [sys.executable, *entry]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv (util-linux): cannot drop to an unprivileged user")
        command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command]
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    lines = [line for line in proc.stderr.splitlines() if "bubblewrap" in line]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("[devcluster] error: missing host packages") and "apt-get install" in lines[0]
    assert "building" not in proc.stderr  # stopped before the first build
    assert not (tmp_path / "cache" / "bin").exists()
