"""The container images a real node runs, built here without Docker and without pulling any image.

Root filesystems come from Debian's packages (mmdebstrap) and PyPI, Go binaries from the Go module
proxy; buildah (``--isolation chroot --storage-driver overlay --pull-never``) assembles them and builds
Dockerfiles. Each image is built once and kept as an OCI archive in
``$DEVCLUSTER_CACHE/images/<name>/<key>/image.tar``, where the key hashes every input (versions,
Dockerfiles, sources), with a ``.complete`` stamp written last. Bases other Dockerfiles build FROM
are also kept in buildah's local storage under the names those Dockerfiles use (re-imported from
their archive when the storage lost them).

Nothing fetched goes into the repository: upstream Dockerfiles and sources are read from the Go
module cache.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from devcluster import build, prereqs, registry, versions
from devcluster.errors import DevclusterError

AGENT_SANDBOX_MODULE = "sigs.k8s.io/agent-sandbox"
REPO_ROOT = Path(__file__).resolve().parent.parent

# What operator/Dockerfile's ARG PYTHON_IMAGE names (python:3.11-slim-bookworm, fully qualified).
PYTHON_BASE_REF = "docker.io/library/python:3.11-slim-bookworm"
# Upstream's runtime is FROM python:3.14-slim; a local trixie base (Python 3.13) replaces that FROM
# through `buildah bud --from`, under a name that does not pretend to be the official image.
RUNTIME_BASE_REF = "localhost/devcluster/python:3.13-slim-trixie"
PYTHON_RUNTIME_REPO = "registry.k8s.io/agent-sandbox/python-runtime-sandbox"
# The upstream deployment manifest's image (sandbox-router/deploy/deployment.yaml).
SANDBOX_ROUTER_REPO = "registry.k8s.io/agent-sandbox/sandbox-router-go"
OPERATOR_REF = "ghcr.io/agentsession/operator:0.1.0"
OPERATOR_DOCKERFILE = "operator/Dockerfile"

# Like the official python:*-slim images: python3 with pip and setuptools installed by pip into
# /usr/local (so `pip uninstall pip` works as there), CA certificates, and passwd (useradd/groupadd)
# from the minbase variant.
_BASE_PACKAGES = (
    "python3",
    "python3-venv",
    "python3-pip-whl",
    "python3-setuptools-whl",
    "python-is-python3",
    "ca-certificates",
    "netbase",
    "tzdata",
)
_BASE_HOOKS = (
    # pip may install as root into /usr/local, as in the official image (no PEP 668 marker).
    'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED',
    # Debian disables ensurepip for its python; pip runs from its own wheel (python3-pip-whl) instead.
    'chroot "$1" sh -c \'whl=$(echo /usr/share/python-wheels/pip-*.whl); python3 "$whl/pip" install -q'
    " --no-index --find-links=/usr/share/python-wheels pip setuptools'",
    'chroot "$1" pip --version',
    'rm -rf "$1"/root/.cache "$1"/var/lib/apt/lists/* "$1"/usr/share/doc/* "$1"/usr/share/man/*',
)
_BASE_ENV = ("PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8")

BUILDAH = ("buildah", "--storage-driver", "overlay")


class ImageError(DevclusterError):
    pass


@dataclass(frozen=True)
class Image:
    """One image: its cache name, the references it is served under, and its builder."""

    name: str
    refs: tuple[str, ...]
    # (name of the input, value): every value that changes the image; hashed into the cache key.
    inputs: Callable[[], dict[str, str]]
    builder: Callable[[Image, Path, Path], None]  # (image, work dir, log) -> image committed as refs[0]
    bases: tuple[str, ...] = ()  # names of images this one builds FROM (kept in buildah storage)
    keep_in_storage: bool = False  # a base other builds use by name
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def key(self) -> str:
        parts = dict(self.inputs())
        parts["refs"] = " ".join(self.refs)
        for base in self.bases:
            parts[f"base:{base}"] = IMAGES[base].key()
        return cache_key(parts)

    def dir(self) -> Path:
        return build.cache_root() / "images" / self.name / self.key()

    def archive(self) -> Path:
        return self.dir() / "image.tar"

    def is_built(self) -> bool:
        return (self.dir() / ".complete").exists()


def cache_key(parts: dict[str, str]) -> str:
    """A short stable hash of every input of an image (order-independent)."""
    blob = json.dumps(parts, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_digest(root: Path, files: Iterable[str]) -> str:
    """One hash over the names and contents of ``files`` (relative to ``root``)."""
    digest = hashlib.sha256()
    for rel in sorted(files):
        path = root / rel
        digest.update(rel.encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"<missing>")
        digest.update(b"\0")
    return digest.hexdigest()


# What operator/Dockerfile builds from (the .dockerignore lets in no more): a change elsewhere (tests,
# the client) neither rebuilds the image nor restarts an installed operator.
OPERATOR_CONTEXT = (".dockerignore", "api", "operator", "nodeagent")


def tracked_files(root: Path = REPO_ROOT, paths: tuple[str, ...] = OPERATOR_CONTEXT) -> list[str]:
    """The tracked files under `paths` (what a clean clone has), for the operator image's key and context."""
    out = subprocess.run(["git", "ls-files", "-z", "--", *paths], cwd=root, capture_output=True, check=True)
    return [name for name in out.stdout.decode().split("\0") if name]


def _tool_version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        return "missing"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr).strip() else "?"


# ---- running the tools --------------------------------------------------------------------------


def _run(cmd: list[str], log: Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=out, text=True, env=env)
        out.write(proc.stdout)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-30:]
        raise ImageError(f"{' '.join(cmd)} failed (exit {proc.returncode}); log {log}:\n" + "\n".join(tail))
    return proc.stdout.strip()


def _buildah(args: list[str], log: Path, cwd: Path | None = None) -> str:
    return _run([*BUILDAH, *args], log, cwd)


def in_storage(ref: str) -> bool:
    """Whether buildah's local storage has the image ``ref``."""
    proc = subprocess.run([*BUILDAH, "inspect", "--type", "image", ref], capture_output=True)
    return proc.returncode == 0


def _commit_rootfs(rootfs_tar: Path | None, refs: tuple[str, ...], config: list[str], log: Path) -> None:
    """An image FROM scratch holding one root filesystem tar, committed as ``refs``."""
    ctr = _buildah(["from", "--pull-never", "scratch"], log)
    try:
        if rootfs_tar is not None:
            _buildah(["add", ctr, str(rootfs_tar), "/"], log)
        _buildah(["config", *config, ctr], log)
        _buildah(["commit", "--rm", ctr, refs[0]], log)
    except BaseException:
        subprocess.run([*BUILDAH, "rm", ctr], capture_output=True)
        raise
    for ref in refs[1:]:
        _buildah(["tag", refs[0], ref], log)


def write_tar(path: Path, entries: dict[str, tuple[bytes | Path | None, int]]) -> Path:
    """A reproducible root filesystem tar: ``{name: (content or None for a directory, mode)}``."""
    with tarfile.open(path, "w") as tar:
        for name, (content, mode) in sorted(entries.items()):
            info = tarfile.TarInfo(name)
            info.mode = mode
            info.mtime = 0
            if content is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                continue
            data = content.read_bytes() if isinstance(content, Path) else content
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _ca_bundle_volume() -> list[str]:
    """Build-time only: the host's CA bundle over the image's, so pip and apt in RUN steps trust
    whatever TLS this machine's network presents. A volume, not a layer: nothing is baked in."""
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    return ["--volume", f"{bundle}:{bundle}:ro"] if bundle.exists() else []


# ---- the images ---------------------------------------------------------------------------------


def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (its first `deb` source for the main archive)."""
    sources = [*sorted(Path("/etc/apt/sources.list.d").glob("*.sources")), Path("/etc/apt/sources.list")]
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for uri in re.findall(r"^URIs:\s*(\S+)", text, re.MULTILINE) + re.findall(
            r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", text, re.MULTILINE
        ):
            if not uri.rstrip("/").endswith("-security"):
                return uri
    raise ImageError("no Debian mirror in /etc/apt/sources.list(.d): configure apt first (images need it)")


def _debian_rootfs(suite: str, work: Path, log: Path) -> Path:
    rootfs = work / f"{suite}-rootfs.tar"
    cmd = [
        "mmdebstrap",
        "--variant=minbase",
        "--mode=root",
        "--format=tar",
        "--include=" + ",".join(_BASE_PACKAGES),
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        *(f"--customize-hook={hook}" for hook in _BASE_HOOKS),
        suite,
        str(rootfs),
        debian_mirror(),
    ]
    _run(cmd, log)
    return rootfs


def _base_inputs(suite: str) -> Callable[[], dict[str, str]]:
    def inputs() -> dict[str, str]:
        return {
            "suite": suite,
            "mirror": debian_mirror(),
            "packages": " ".join(_BASE_PACKAGES),
            "hooks": "\n".join(_BASE_HOOKS),
            "env": " ".join(_BASE_ENV),
        }

    return inputs


def _build_base(image: Image, work: Path, log: Path) -> None:
    rootfs = _debian_rootfs(image.extra["suite"], work, log)
    config = [arg for env in _BASE_ENV for arg in ("--env", env)]
    config += ["--cmd", "python3", "--created-by", f"mmdebstrap {image.extra['suite']} (devcluster)"]
    _commit_rootfs(rootfs, image.refs, config, log)


def agent_sandbox_dir() -> Path:
    return build.module_dir(AGENT_SANDBOX_MODULE, versions.AGENT_SANDBOX)


def python_runtime_tags() -> tuple[str, ...]:
    """The tags served: the pinned version (config/samples and tests/e2e use it)."""
    return (versions.AGENT_SANDBOX,)


def _python_runtime_inputs() -> dict[str, str]:
    example = agent_sandbox_dir() / "examples" / "python-runtime-sandbox"
    return {
        "agent-sandbox": versions.AGENT_SANDBOX,
        "context": tree_digest(example, ["Dockerfile", "requirements.txt", "main.py"]),
    }


def _build_python_runtime(image: Image, work: Path, log: Path) -> None:
    # Upstream's own Dockerfile and context, read from the module cache; only its first FROM is
    # replaced (buildah's --from) by the local base.
    example = agent_sandbox_dir() / "examples" / "python-runtime-sandbox"
    args = ["bud", "--isolation", "chroot", "--pull-never", "--layers=false", "--from", RUNTIME_BASE_REF]
    args += _ca_bundle_volume()
    args += ["-f", str(example / "Dockerfile"), "-t", image.refs[0], str(example)]
    _buildah(args, log)
    for ref in image.refs[1:]:
        _buildah(["tag", image.refs[0], ref], log)


def pause_source() -> Path:
    return build.module_dir("k8s.io/kubernetes", versions.KUBERNETES) / "build" / "pause" / "linux" / "pause.c"


def _pause_inputs() -> dict[str, str]:
    return {
        "pause.c": file_digest(pause_source()),
        "kubernetes": versions.KUBERNETES,
        "gcc": _tool_version(["gcc", "--version"]),
    }


def _build_pause(image: Image, work: Path, log: Path) -> None:
    binary = work / "pause"
    version = versions.PAUSE_TAGS[0]
    cflags = ["-Os", "-static", "-Wall", "-Werror", f"-DVERSION=v{version}"]
    _run(["gcc", *cflags, "-o", str(binary), str(pause_source())], log)
    _run(["strip", str(binary)], log)
    # Like the official image: /pause as its entrypoint, run as 65535.
    config = ["--entrypoint", '["/pause"]', "--user", "65535:65535"]
    _commit_rootfs(write_tar(work / "rootfs.tar", {"pause": (binary, 0o755)}), image.refs, config, log)


def _sandbox_router_inputs() -> dict[str, str]:
    return {"agent-sandbox": versions.AGENT_SANDBOX, "go": _tool_version(["go", "version"])}


# distroless/static:nonroot's account files, which the router's upstream image runs with.
_PASSWD = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
_GROUP = "root:x:0:\nnonroot:x:65532:\n"


def _build_sandbox_router(image: Image, work: Path, log: Path) -> None:
    # A tools module on the pinned agent-sandbox module (not `go install`: the proxy here refuses its
    # version list), built as upstream's Dockerfile does: static, stripped, version stamped.
    src = build.cache_root() / "src" / f"sandbox-router-{versions.AGENT_SANDBOX}"
    src.mkdir(parents=True, exist_ok=True)
    (src / "go.mod").write_text(
        "module agentsession.dev/devcluster/sandbox-router-tools\n\ngo 1.26\n\n"
        f"require {AGENT_SANDBOX_MODULE} {versions.AGENT_SANDBOX}\n"
    )
    (src / "tools.go").write_text("package tools\n")
    binary = work / "sandbox-router"
    ldflags = f"-s -w -X {AGENT_SANDBOX_MODULE}/internal/version.gitVersion={versions.AGENT_SANDBOX}"
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod")
    package = f"{AGENT_SANDBOX_MODULE}/sandbox-router/cmd"
    _run(["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(binary), package], log, src, env)
    rootfs = {
        "sandbox-router": (binary, 0o755),
        "etc": (None, 0o755),
        "etc/passwd": (_PASSWD.encode(), 0o644),
        "etc/group": (_GROUP.encode(), 0o644),
        "tmp": (None, 0o1777),
        "home": (None, 0o755),
        "home/nonroot": (None, 0o700),
    }
    config = ["--entrypoint", '["/sandbox-router"]', "--user", "65532:65532", "--workingdir", "/"]
    for port in ("8080", "8443", "9090", "8081"):
        config += ["--port", port]
    _commit_rootfs(write_tar(work / "rootfs.tar", rootfs), image.refs, config, log)


def _operator_inputs() -> dict[str, str]:
    return {"dockerfile": OPERATOR_DOCKERFILE, "sources": tree_digest(REPO_ROOT, tracked_files())}


def build_dockerfile(
    dockerfile: Path, context: Path, tag: str, log: Path, build_args: dict[str, str] | None = None
) -> None:
    """A real Dockerfile build with buildah, never pulling: FROM names resolve in local storage."""
    args = ["bud", "--isolation", "chroot", "--pull-never", "--layers=false", *_ca_bundle_volume()]
    for name, value in (build_args or {}).items():
        args += ["--build-arg", f"{name}={value}"]
    args += ["-f", str(dockerfile), "-t", tag, str(context)]
    _buildah(args, log)


def _build_operator(image: Image, work: Path, log: Path) -> None:
    # Context: a clean copy of the tracked files, so the build sees exactly what a clone has.
    context = work / "context"
    for rel in tracked_files():
        src = REPO_ROOT / rel
        if src.is_file():
            (context / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, context / rel)
    build_dockerfile(context / OPERATOR_DOCKERFILE, context, image.refs[0], log, {"PYTHON_IMAGE": PYTHON_BASE_REF})
    for ref in image.refs[1:]:
        _buildah(["tag", image.refs[0], ref], log)


def _exists_at(commit: str, path: str) -> bool:
    found = subprocess.run(["git", "cat-file", "-e", f"{commit}:{path}"], cwd=REPO_ROOT, capture_output=True)
    return found.returncode == 0


def _git_archive(commit: str, paths: tuple[str, ...], dest: Path) -> None:
    """`paths` as they were at `commit`, unpacked under `dest` (needs the clone's history)."""
    known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=REPO_ROOT, capture_output=True)
    if known.returncode != 0:
        raise ImageError(f"commit {commit} is not in this clone (a shallow clone?): run `git fetch --unshallow`")
    # An older commit may lack some (nodeagent/ came later): archive what it had.
    present = [p for p in paths if _exists_at(commit, p)]
    archive = subprocess.run(["git", "archive", commit, *present], cwd=REPO_ROOT, capture_output=True, check=True)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")


def _build_operator_at(image: Image, work: Path, log: Path) -> None:
    context = work / "context"
    _git_archive(image.extra["commit"], OPERATOR_CONTEXT, context)
    build_dockerfile(context / OPERATOR_DOCKERFILE, context, image.refs[0], log, {"PYTHON_IMAGE": PYTHON_BASE_REF})


def operator_at(commit: str) -> Image:
    """The operator image of an earlier commit (an upgrade's starting point), tagged with the commit."""
    short = commit[:12]
    return Image(
        f"operator-{short}",
        (f"{OPERATOR_REF.rsplit(':', 1)[0]}:{short}",),
        lambda: {"commit": commit, "dockerfile": OPERATOR_DOCKERFILE},
        _build_operator_at,
        bases=(BASE.name,),
        extra={"commit": commit},
    )


def checkout_at(commit: str, paths: tuple[str, ...], dest: Path) -> Path:
    """Files of an earlier commit (its chart, CRDs, config/) under `dest`, for an upgrade from it."""
    _git_archive(commit, paths, dest)
    return dest


IMAGES: dict[str, Image] = {}


def _register(image: Image) -> Image:
    IMAGES[image.name] = image
    return image


BASE = _register(
    Image(
        "python-base-bookworm",
        (PYTHON_BASE_REF,),
        _base_inputs(versions.DEBIAN_BASE_SUITE),
        _build_base,
        keep_in_storage=True,
        extra={"suite": versions.DEBIAN_BASE_SUITE},
    )
)
RUNTIME_BASE = _register(
    Image(
        "python-base-trixie",
        (RUNTIME_BASE_REF,),
        _base_inputs(versions.DEBIAN_RUNTIME_SUITE),
        _build_base,
        keep_in_storage=True,
        extra={"suite": versions.DEBIAN_RUNTIME_SUITE},
    )
)
PAUSE = _register(
    Image("pause", tuple(f"registry.k8s.io/pause:{tag}" for tag in versions.PAUSE_TAGS), _pause_inputs, _build_pause)
)
PYTHON_RUNTIME = _register(
    Image(
        "python-runtime-sandbox",
        tuple(f"{PYTHON_RUNTIME_REPO}:{tag}" for tag in python_runtime_tags()),
        _python_runtime_inputs,
        _build_python_runtime,
        bases=(RUNTIME_BASE.name,),
    )
)
SANDBOX_ROUTER = _register(
    Image(
        "sandbox-router",
        (f"{SANDBOX_ROUTER_REPO}:latest", f"{SANDBOX_ROUTER_REPO}:{versions.AGENT_SANDBOX}"),
        _sandbox_router_inputs,
        _build_sandbox_router,
    )
)
OPERATOR = _register(Image("operator", (OPERATOR_REF,), _operator_inputs, _build_operator, bases=(BASE.name,)))

# What a real node serves from its local registry (the bases are only built FROM).
SERVED = (PAUSE.name, PYTHON_RUNTIME.name, SANDBOX_ROUTER.name, OPERATOR.name)


# ---- build, cache, export -----------------------------------------------------------------------


def ensure_in_storage(image: Image, out: IO[str] = sys.stderr) -> None:
    """Build ``image`` if needed and make sure buildah's storage has it under all its names."""
    build_image(image, out)
    if all(in_storage(ref) for ref in image.refs):
        return
    log = image.dir() / "import.log"
    archived = _buildah(["pull", "--quiet", f"oci-archive:{image.archive()}"], log).splitlines()[-1]
    for ref in image.refs:
        _buildah(["tag", archived, ref], log)


def build_image(image: Image, out: IO[str] = sys.stderr) -> float | None:
    """Build one image unless cached; returns the build time in seconds (None when cached).

    A lock per image: a second builder (another checkout sharing the cache) waits, then finds it built.
    """
    if image.is_built():
        return None
    prereqs.ensure([prereqs.IMAGES], out)  # before any base image or build step
    for base in image.bases:
        ensure_in_storage(IMAGES[base], out)
    with build.cache_lock(f"image-{image.name}"):
        if image.is_built():
            return None
        elapsed = _build_locked(image, out)
        # Sources edited during the build moved the key: what was built is not what the checkout holds
        # (and callers, pushing image.dir()'s archive, found no such file). Build what it holds now.
        for _ in range(BUILD_TRIES - 1):
            if image.is_built():
                return elapsed
            print(f"[devcluster] image {image.refs[0]}: sources changed during its build, building again", file=out)
            elapsed += _build_locked(image, out)
        if not image.is_built():
            raise ImageError(
                f"image {image.refs[0]}: its sources kept changing during {BUILD_TRIES} builds; "
                "stop editing them and run the command again"
            )
        return elapsed


BUILD_TRIES = 3


def _build_locked(image: Image, out: IO[str]) -> float:
    # The key once: sources edited during a long build must not move the output directory.
    key = image.key()
    directory = build.cache_root() / "images" / image.name / key
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    log = directory / "build.log"
    log.write_text("")
    print(f"[devcluster] building image {image.refs[0]} (first time only; log {log}) ...", file=out, flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"devcluster-image-{image.name}-") as tmp:
        image.builder(image, Path(tmp), log)
    archive = directory / "image.tar"
    # One archive, every name: skopeo pushes it under each tag.
    _buildah(["push", "--quiet", image.refs[0], f"oci-archive:{archive}"], log)
    if not image.keep_in_storage:
        # Served from the archive; drop the layers from buildah's storage (they can be large).
        for ref in image.refs:
            subprocess.run([*BUILDAH, "rmi", ref], capture_output=True)
    elapsed = time.monotonic() - started
    stamp = {"seconds": round(elapsed, 1), "refs": list(image.refs), "key": key}
    (directory / ".complete").write_text(json.dumps(stamp))
    print(f"[devcluster] built image {image.refs[0]} in {elapsed:.0f} s", file=out, flush=True)
    return elapsed


def unpack(archive: Path, dest: Path) -> dict[str, Any]:
    """Unpack an OCI archive's single image into ``dest`` (layers in order, whiteouts applied).

    Returns the image's runtime config (``Cmd``, ``Entrypoint``, ``Env``, ``User``, ``WorkingDir``).
    """
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as outer:

        def blob(digest: str) -> IO[bytes]:
            member = outer.extractfile("blobs/" + digest.replace(":", "/"))
            if member is None:
                raise ImageError(f"{archive}: blob {digest} missing")
            return member

        index = json.load(blob_or(outer, "index.json"))
        manifest = json.load(blob(index["manifests"][0]["digest"]))
        config = json.load(blob(manifest["config"]["digest"]))
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=blob(layer["digest"]), mode="r|*") as tar:
                _apply_layer(tar, dest)
    return dict(config.get("config") or {})


def blob_or(outer: tarfile.TarFile, name: str) -> IO[bytes]:
    member = outer.extractfile(name)
    if member is None:
        raise ImageError(f"{name} missing from the archive")
    return member


def _apply_layer(tar: tarfile.TarFile, dest: Path) -> None:
    for member in tar:
        path = Path(member.name)
        base = path.name
        if base == ".wh..wh..opq":
            directory = dest / path.parent
            for child in directory.iterdir() if directory.is_dir() else []:
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
            continue
        if base.startswith(".wh."):
            target = dest / path.parent / base.removeprefix(".wh.")
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            continue
        target = dest / path
        if (target.exists() or target.is_symlink()) and not (member.isdir() and target.is_dir()):
            shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()
        tar.extract(member, dest, numeric_owner=True, filter="fully_trusted")


def build_time(image: Image) -> float | None:
    """The recorded first-build time of a cached image."""
    stamp = image.dir() / ".complete"
    if not stamp.exists():
        return None
    return float(json.loads(stamp.read_text() or "{}").get("seconds", 0.0))


def build_all(names: Iterable[str] = SERVED, out: IO[str] = sys.stderr) -> dict[str, float | None]:
    """Build every image in ``names`` (default: all a real node serves); seconds per image, None if cached."""
    return {name: build_image(IMAGES[name], out) for name in names}


def push(image: Image, registry_address: str, log: Path) -> list[str]:
    """Copy a built image's archive into the registry at ``registry_address`` under each of its names."""
    pushed = []
    for ref in image.refs:
        dest = registry.local_reference(ref, registry_address)
        source = f"oci-archive:{image.archive()}"
        _run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", source, f"docker://{dest}"], log)
        pushed.append(dest)
    return pushed


def push_all(registry_address: str, names: Iterable[str] = SERVED, out: IO[str] = sys.stderr) -> list[str]:
    """Build (if needed) and push every image in ``names`` into a running registry; returns the local refs."""
    pushed: list[str] = []
    for name in names:
        image = IMAGES[name]
        build_image(image, out)
        started = time.monotonic()
        pushed += push(image, registry_address, image.dir() / "push.log")
        print(
            f"[devcluster] pushed {' '.join(image.refs)} to {registry_address} in {time.monotonic() - started:.1f} s",
            file=out,
            flush=True,
        )
    return pushed
