"""Build the bubblewrap command line that gives one container its own filesystem (pure; no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# Host system directories every container sees read-only (as the image's own system files).
SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/var")
# On merged-/usr systems these are symlinks into /usr; recreated as symlinks, bound otherwise.
TOP_LEVEL_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
RUNTIME_MOUNT = "/runtime"
DEFAULT_PATH = f"{RUNTIME_MOUNT}/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    read_only: bool = False


@dataclass
class ContainerSandbox:
    hostname: str
    root_binds: list[Mount] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/app"
    run_as_user: int | None = None
    run_as_group: int | None = None
    supplemental_groups: tuple[int, ...] = ()


def _top_level(path: str) -> list[str]:
    p = Path(path)
    if p.is_symlink():
        return ["--symlink", str(p.readlink()), path]
    if p.exists():
        return ["--ro-bind", path, path]
    return []


def _through_links(target: str) -> str:
    """Where a mount under the host's /var/run symlink lands: bwrap makes mount points before the new root is
    the root, so an absolute link in a bound system dir (/var/run -> /run) does not lead there by itself. Inside,
    the link leads to the mount as in a container (a projected token at /var/run/secrets/...)."""
    link = Path("/var/run")
    if link.is_symlink() and (target == "/var/run" or target.startswith("/var/run/")):
        return str(link.readlink()) + target.removeprefix("/var/run")
    return target


def bwrap_command(box: ContainerSandbox, argv: list[str]) -> list[str]:
    """bwrap keeps its own tmpfs root; system dirs are bound read-only, the pod's dirs read-write.

    (A read-only bind of `/` cannot take new mount points, hence the directory-by-directory recipe.)
    """
    cmd = [
        "bwrap",
        "--die-with-parent",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--hostname",
        box.hostname,
        "--new-session",
    ]
    for d in SYSTEM_DIRS:
        if Path(d).exists():
            cmd += ["--ro-bind", d, d]
    for d in TOP_LEVEL_LINKS:
        cmd += _top_level(d)
    cmd += ["--dev", "/dev", "--proc", "/proc", "--dir", "/run"]  # /run: the image's own, empty
    for mount in box.root_binds:
        cmd += ["--ro-bind" if mount.read_only else "--bind", str(mount.source), _through_links(mount.target)]
    cmd += ["--chdir", box.workdir, "--clearenv"]
    for key, value in box.env.items():
        cmd += ["--setenv", key, value]
    cmd.append("--")
    if box.run_as_user is not None or box.run_as_group is not None:
        cmd += ["setpriv"]
        if box.run_as_user is not None:
            cmd += [f"--reuid={box.run_as_user}"]
        cmd += [f"--regid={box.run_as_group if box.run_as_group is not None else box.run_as_user or 0}"]
        if box.supplemental_groups:
            cmd += ["--groups=" + ",".join(str(g) for g in box.supplemental_groups)]
        else:
            cmd += ["--clear-groups"]
        cmd += ["--"]
    return cmd + argv
