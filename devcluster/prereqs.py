"""Host prerequisites, checked all at once before any build starts.

One table: host command -> Debian package, grouped by what needs it. ``ensure(groups)`` installs what
is missing when running as root on Debian (one ``apt-get update``, one ``apt-get install``), and
otherwise stops at once with one line naming the packages.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from devcluster.errors import DevclusterError

KWOK = "kwok"  # the simulated node: bubblewrap pods
REAL_NODE = "real-node"  # kubelet + containerd + CNI + kube-proxy + NetworkPolicy
IMAGES = "images"  # the real node's images and registry
LINT = "lint"  # make lint (the client's shell scripts)
OPS = "ops"  # the operations kit's tests: Argo CD health in Lua 5.1 (gopher-lua's), Prometheus rules
NODE = "node"  # the TypeScript client (client-ts): Node.js 20+ and npm
SHELLS = "shells"  # the unit tests run the client's in-pod scripts under each shell an image may have

# group -> {command: Debian package}
COMMANDS: dict[str, dict[str, str]] = {
    KWOK: {"bwrap": "bubblewrap", "setpriv": "util-linux"},
    LINT: {"shellcheck": "shellcheck"},
    OPS: {"lua5.1": "lua5.1", "promtool": "prometheus"},
    NODE: {"node": "nodejs", "npm": "npm"},
    SHELLS: {"dash": "dash", "bash": "bash", "busybox": "busybox"},  # Debian's sh, bash, Alpine's sh
    # kube-proxy, kube-router (iptables + ipset), the node's network namespace and veths.
    REAL_NODE: {
        "runc": "runc",
        "setpriv": "util-linux",
        "nsenter": "util-linux",
        "iptables": "iptables",
        "ipset": "ipset",
        "conntrack": "conntrack",
        "nft": "nftables",
        "ip": "iproute2",
    },
    IMAGES: {
        "mmdebstrap": "mmdebstrap",
        "buildah": "buildah",
        "skopeo": "skopeo",
        "newuidmap": "uidmap",
        "gcc": "gcc",
        "strip": "binutils",
        "bwrap": "bubblewrap",
    },
}
# Files (not commands) a group needs: path -> package. The static pause binary links libc.a.
FILES: dict[str, dict[str, str]] = {IMAGES: {"/usr/lib/x86_64-linux-gnu/libc.a": "libc6-dev"}}


def for_node(kind: str) -> list[str]:
    """The groups ``python -m devcluster up|build`` needs for a node kind (``kwok`` or ``real``)."""
    return [KWOK, REAL_NODE, IMAGES] if kind == "real" else [KWOK]


def missing(groups: Iterable[str]) -> list[str]:
    """The Debian packages providing the commands and files ``groups`` need that are absent (sorted)."""
    packages: set[str] = set()
    for group in groups:
        for command, package in COMMANDS.get(group, {}).items():
            if shutil.which(command) is None:
                packages.add(package)
        for path, package in FILES.get(group, {}).items():
            if not Path(path).exists():
                packages.add(package)
    return sorted(packages)


def _can_install() -> bool:
    return os.geteuid() == 0 and Path("/etc/debian_version").exists() and shutil.which("apt-get") is not None


class PrerequisiteError(DevclusterError):
    pass


# Debian's hook that every package's maintainer scripts ask before they start a service (invoke-rc.d and
# deb-systemd-invoke alike): 101 = not allowed.
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")


@contextlib.contextmanager
def _no_services_started() -> Iterator[None]:
    """`prometheus` (for promtool) would start a server listening on every address on a systemd host:
    nothing the project installs may start a daemon, so the hook refuses every start meanwhile."""
    if POLICY_RC_D.exists():  # the machine's own policy holds
        yield
        return
    POLICY_RC_D.write_text("#!/bin/sh\n# devcluster: no service starts while it installs host packages\nexit 101\n")
    POLICY_RC_D.chmod(0o755)
    try:
        yield
    finally:
        POLICY_RC_D.unlink(missing_ok=True)


def ensure(groups: Iterable[str], out: IO[str] = sys.stderr) -> None:
    """Make sure every prerequisite of ``groups`` is present; install as root on Debian, else raise."""
    groups = list(groups)
    packages = missing(groups)
    if not packages:
        return
    if not _can_install():
        raise PrerequisiteError(f"missing host packages for {', '.join(groups)}: apt-get install {' '.join(packages)}")
    print(f"[devcluster] installing host packages: {' '.join(packages)}", file=out, flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with _no_services_started():
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise PrerequisiteError(f"{' '.join(cmd)} failed: {proc.stderr.strip().splitlines()[-1:]}")
    still = missing(groups)
    if still:
        raise PrerequisiteError(f"still missing after apt-get install: {' '.join(still)}")


def main(argv: list[str] | None = None) -> int:
    """``python -m devcluster.prereqs [GROUP...]``: .ci/run's check (default: the kwok node's)."""
    try:
        ensure(argv if argv else [KWOK])
    except PrerequisiteError as exc:
        print(f"[devcluster] {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
