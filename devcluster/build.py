"""Build the control plane's binaries once into a machine-local cache and reuse them.

Layout: ``$DEVCLUSTER_CACHE`` (default ``~/.cache/agentsession-devcluster``)
``/bin/<component>-<version>/`` holds the binaries, with a ``.complete`` stamp written last, so an
interrupted build is simply redone. Nothing here is ever written into the repository.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from devcluster import prereqs, versions
from devcluster.errors import DevclusterError


def cache_root() -> Path:
    return Path(os.environ.get("DEVCLUSTER_CACHE", Path.home() / ".cache" / "agentsession-devcluster"))


@dataclass(frozen=True)
class Component:
    name: str
    version: str
    binaries: tuple[str, ...]

    @property
    def bin_dir(self) -> Path:
        return cache_root() / "bin" / f"{self.name}-{self.version}"

    @property
    def src_dir(self) -> Path:
        return cache_root() / "src" / f"{self.name}-{self.version}"

    def is_built(self) -> bool:
        return (self.bin_dir / ".complete").exists()

    def path(self, binary: str) -> Path:
        return self.bin_dir / binary


KUBERNETES = Component(
    "kubernetes",
    versions.KUBERNETES,
    ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"),
)
ETCD = Component("etcd", versions.ETCD, ("etcd",))
KWOK = Component("kwok", versions.KWOK, ("kwok",))
AGENT_SANDBOX = Component("agent-sandbox", versions.AGENT_SANDBOX, ("agent-sandbox-controller",))
COMPONENTS = (KUBERNETES, ETCD, KWOK, AGENT_SANDBOX)
# Only pods with a sandboxd image run it (no example or test does): built on demand by the kwok pod runner,
# so a first `make demo` does not wait for it.
SANDBOXD = Component("sandboxd", versions.AGENT_SANDBOX, ("sandboxd",))
# Only the real node needs it (its images' registry): built on demand by devcluster.registry.
DISTRIBUTION = Component("distribution", versions.DISTRIBUTION, ("registry",))

# The real node (NODE=real). Same Kubernetes version as the control plane, its own cache entry.
KUBERNETES_NODE = Component("kubernetes-node", versions.KUBERNETES, ("kubelet", "kube-proxy"))
CONTAINERD = Component("containerd", versions.CONTAINERD, ("containerd", "ctr", "containerd-shim-runc-v2"))
CNI_PLUGINS = Component("cni-plugins", versions.CNI_PLUGINS, ("ptp", "host-local", "loopback", "portmap"))
KUBE_ROUTER = Component("kube-router", versions.KUBE_ROUTER, ("kube-router",))
# "+restore<N>": the shim carries devcluster's restore extension (devcluster/gvisor); bump N when it changes,
# so every machine's cache builds it again.
GVISOR_EXTENSION = "restore4"
GVISOR = Component("gvisor", f"{versions.GVISOR}+{GVISOR_EXTENSION}", ("runsc", "containerd-shim-runsc-v1"))
GVISOR_SOURCES = Path(__file__).parent / "gvisor"
"""Go packages devcluster adds to gVisor's tools module: the restore extension and the shim that links it."""
NODE_COMPONENTS = (KUBERNETES_NODE, CONTAINERD, CNI_PLUGINS, KUBE_ROUTER, GVISOR)

# kube-router v2.1.0 pins dependencies with published advisories; its tools module raises them to fixed
# releases (minimum version selection keeps the higher one). Dev cluster only: never shipped.
KUBE_ROUTER_RAISED = (
    "golang.org/x/net@v0.38.0",
    "golang.org/x/crypto@v0.36.0",
    "golang.org/x/oauth2@v0.27.0",
    "google.golang.org/grpc@v1.64.1",
    "google.golang.org/protobuf@v1.34.2",
    "github.com/docker/docker@v25.0.6+incompatible",
)


class BuildError(DevclusterError):
    pass


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    env.setdefault("GOFLAGS", "-mod=mod")
    return env


def _run(cmd: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env or _go_env())
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-25:]
        raise BuildError(f"{' '.join(cmd)} failed (exit {proc.returncode}); log {log}:\n" + "\n".join(tail))


def module_dir(module: str, version: str) -> Path:
    """Download a Go module (no build) and return its directory in the module cache."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        env=_go_env(),
    )
    info = json.loads(out.stdout or "{}")
    if out.returncode != 0 or "Dir" not in info:
        raise BuildError(f"go mod download {module}@{version}: {info.get('Error') or out.stderr.strip()}")
    return Path(info["Dir"])


def _go_mod_file(module: str, version: str) -> Path:
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"], capture_output=True, text=True, env=_go_env()
    )
    info = json.loads(out.stdout or "{}")
    if "GoMod" not in info:
        raise BuildError(f"go mod download {module}@{version}: {info.get('Error') or out.stderr.strip()}")
    return Path(info["GoMod"])


def kubernetes_tools_gomod() -> str:
    """A tools module requiring k8s.io/kubernetes with every staging module pinned.

    k8s.io/kubernetes requires its staging modules at v0.0.0 (replaced by local paths in its own
    repository); outside it those must be replaced by their released v0.<minor>.<patch> tags.
    """
    gomod = _go_mod_file("k8s.io/kubernetes", versions.KUBERNETES).read_text()
    staging = sorted(set(re.findall(r"^\s*(k8s\.io/[\w.-]+) v0\.0\.0\s*$", gomod, re.MULTILINE)))
    if not staging:
        raise BuildError("found no staging modules in k8s.io/kubernetes's go.mod")
    go_line = re.search(r"^go (\S+)$", gomod, re.MULTILINE)
    lines = [
        "module agentsession.dev/devcluster/kubernetes-tools",
        "",
        f"go {go_line.group(1) if go_line else '1.25'}",
        "",
        f"require k8s.io/kubernetes {versions.KUBERNETES}",
        "",
        "replace (",
        *(f"\t{mod} v0.0.0 => {mod} {versions.KUBERNETES_STAGING}" for mod in staging),
        ")",
        "",
    ]
    return "\n".join(lines)


def _tools_module(component: Component, gomod: str, log: Path) -> Path:
    src = component.src_dir
    src.mkdir(parents=True, exist_ok=True)
    (src / "go.mod").write_text(gomod)
    (src / "tools.go").write_text("package tools\n")
    return src


def _build_kubernetes(log: Path, component: Component = KUBERNETES) -> None:
    src = _tools_module(component, kubernetes_tools_gomod(), log)
    _run(["go", "get", f"k8s.io/kubernetes@{versions.KUBERNETES}"], src, log)
    minor = versions.KUBERNETES.split(".")[1]
    ldflags = " ".join(
        [
            f"-X k8s.io/component-base/version.gitVersion={versions.KUBERNETES}",
            "-X k8s.io/component-base/version.gitMajor=1",
            f"-X k8s.io/component-base/version.gitMinor={minor}",
            "-X k8s.io/component-base/version.gitTreeState=clean",
            f"-X k8s.io/client-go/pkg/version.gitVersion={versions.KUBERNETES}",
            "-X k8s.io/client-go/pkg/version.gitMajor=1",
            f"-X k8s.io/client-go/pkg/version.gitMinor={minor}",
            "-s -w",
        ]
    )
    packages = [f"k8s.io/kubernetes/cmd/{name}" for name in component.binaries]
    _run(["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(component.bin_dir) + "/", *packages], src, log)


def _build_kubernetes_node(log: Path) -> None:
    _build_kubernetes(log, KUBERNETES_NODE)


def _build_module_packages(
    component: Component,
    module: str,
    packages: list[str],
    log: Path,
    tags: str = "",
    raise_deps: tuple[str, ...] = (),
    ldflags: str = "",
) -> None:
    """Build `packages` of `module`@component.version through a tools module (no `go install`: see below)."""
    name = component.name
    gomod = f"module agentsession.dev/devcluster/{name}-tools\n\ngo 1.26\n\nrequire {module} {component.version}\n"
    src = _tools_module(component, gomod, log)
    for dep in raise_deps:
        _run(["go", "get", dep], src, log)
    cmd = ["go", "build", "-trimpath", "-ldflags", f"-s -w {ldflags}".strip()]
    if tags:
        cmd += ["-tags", tags]
    _run([*cmd, "-o", str(component.bin_dir) + "/", *(f"{module}/{p}" for p in packages)], src, log)


def _build_containerd(log: Path) -> None:
    _build_module_packages(
        CONTAINERD,
        "github.com/containerd/containerd/v2",
        ["cmd/containerd", "cmd/ctr", "cmd/containerd-shim-runc-v2"],
        log,
        tags="no_btrfs no_devmapper no_zfs",
        # What `kubectl get nodes -o wide` shows as the runtime version (else "2.4.2+unknown").
        ldflags=f"-X github.com/containerd/containerd/v2/version.Version={CONTAINERD.version.removeprefix('v')}",
    )


def _build_cni_plugins(log: Path) -> None:
    _build_module_packages(
        CNI_PLUGINS,
        "github.com/containernetworking/plugins",
        ["plugins/main/ptp", "plugins/ipam/host-local", "plugins/main/loopback", "plugins/meta/portmap"],
        log,
    )


def _build_kube_router(log: Path) -> None:
    _build_module_packages(
        KUBE_ROUTER,
        "github.com/cloudnativelabs/kube-router/v2",
        ["cmd/kube-router"],
        log,
        raise_deps=KUBE_ROUTER_RAISED,
    )


# The one line of gVisor devcluster changes (GVISOR_PATCH): the shim's start sets its own oom_score_adj to
# -999 and fails when it may not. Lowering it needs CAP_SYS_RESOURCE, which no process on this kind of
# machine has (the same reason containerd runs with restrict_oom_score_adj): every gVisor pod failed with
# "failed to start shim: ... failed to set OOM Score on shim: write /proc/<pid>/oom_score_adj: permission
# denied". Patched to go on without it, as containerd's own shims do when unprivileged.
GVISOR_PATCH = (
    "pkg/shim/v1/manager.go",
    "if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {",
    "if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil && !os.IsPermission(err) {",
)


def _build_gvisor(log: Path) -> None:
    """runsc and its containerd shim from the module's `go` branch (the Bazel-free tree gVisor publishes).

    A tools module, not `go install ...@version` (`go build pkg@version` is refused): one module builds
    both binaries against one resolved dependency graph, and its replace directive points at a copy of
    the pinned module with GVISOR_PATCH applied. The shim is gVisor's own (gvisor.dev/gvisor/shim) linked
    with devcluster's restore extension (devcluster/gvisor/); containerd looks for the binary as
    containerd-shim-runsc-v1.
    """
    src = _tools_module(
        GVISOR,
        "module agentsession.dev/devcluster/gvisor-tools\n\ngo 1.26.3\n\n"
        f"require gvisor.dev/gvisor {versions.GVISOR}\n\nreplace gvisor.dev/gvisor => ./gvisor\n",
        log,
    )
    copy = src / "gvisor"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(module_dir("gvisor.dev/gvisor", versions.GVISOR), copy)
    for path in copy.rglob("*"):  # the module cache's files are read-only
        path.chmod(path.stat().st_mode | 0o200)
    name, before, after = GVISOR_PATCH
    text = (copy / name).read_text()
    if before not in text:
        raise BuildError(f"gVisor {versions.GVISOR}: {name} no longer has the line devcluster patches: {before}")
    (copy / name).write_text(text.replace(before, after))
    # What `runsc --version` prints (else VERSION_MISSING): the pinned pseudo-version.
    ldflags = f"-s -w -X gvisor.dev/gvisor/runsc/version.version={versions.GVISOR}"
    for package in ("restoreext", "shim"):
        shutil.rmtree(src / package, ignore_errors=True)
        shutil.copytree(GVISOR_SOURCES / package, src / package)
    tools = "agentsession.dev/devcluster/gvisor-tools"
    for binary, package in (("runsc", "gvisor.dev/gvisor/runsc"), ("containerd-shim-runsc-v1", f"{tools}/shim")):
        out = str(GVISOR.path(binary))
        _run(["go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, package], src, log)


def _build_etcd(log: Path) -> None:
    gomod = "module agentsession.dev/devcluster/etcd-tools\n\ngo 1.24\n"
    src = _tools_module(ETCD, gomod, log)
    _run(["go", "get", f"go.etcd.io/etcd/server/v3@{versions.ETCD}"], src, log)
    _run(
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(ETCD.path("etcd")), "go.etcd.io/etcd/server/v3"],
        src,
        log,
    )


def _go_install(component: Component, packages: list[str], log: Path) -> None:
    env = _go_env()
    env["GOBIN"] = str(component.bin_dir)
    env.pop("GOFLAGS", None)
    for pkg in packages:
        _run(["go", "install", "-trimpath", "-ldflags", "-s -w", f"{pkg}@{component.version}"], cache_root(), log, env)


def _build_kwok(log: Path) -> None:
    _go_install(KWOK, ["sigs.k8s.io/kwok/cmd/kwok"], log)


def _build_agent_sandbox(log: Path) -> None:
    _build_agent_sandbox_package(AGENT_SANDBOX, "sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller", log)


def _build_sandboxd(log: Path) -> None:
    _build_agent_sandbox_package(SANDBOXD, "sigs.k8s.io/agent-sandbox/packages/sandboxd/cmd/sandboxd", log)


def _build_agent_sandbox_package(component: Component, package: str, log: Path) -> None:
    # Not `go install pkg@version`: that asks the proxy for the module's version list (for deprecation
    # notices), which the proxy here refuses for this module; a tools module needs only the exact version.
    gomod = (
        "module agentsession.dev/devcluster/agent-sandbox-tools\n\ngo 1.26\n\n"
        f"require sigs.k8s.io/agent-sandbox {versions.AGENT_SANDBOX}\n"
    )
    src = _tools_module(component, gomod, log)
    _run(["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(component.bin_dir) + "/", package], src, log)


def _build_distribution(log: Path) -> None:
    _go_install(DISTRIBUTION, ["github.com/distribution/distribution/v3/cmd/registry"], log)


# Tools beside the cluster (built on demand, never by build_all): helm for charts/agentsession.
HELM = Component("helm", versions.HELM, ("helm",))
KREW = Component("krew", versions.KREW, ("krew",))


def _build_go_tool(component: Component, module: str, package: str, log: Path) -> None:
    """A command of one Go module at the component's exact version (a tools module, like agent-sandbox: only
    that version is asked of the proxy)."""
    name = component.name
    gomod = f"module agentsession.dev/devcluster/{name}-tools\n\ngo 1.26\n\nrequire {module} {component.version}\n"
    src = _tools_module(component, gomod, log)
    _run(["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(component.bin_dir) + "/", package], src, log)


def _build_helm(log: Path) -> None:
    _build_go_tool(HELM, "helm.sh/helm/v3", "helm.sh/helm/v3/cmd/helm", log)


def _build_krew(log: Path) -> None:
    _build_go_tool(KREW, "sigs.k8s.io/krew", "sigs.k8s.io/krew/cmd/krew", log)


_BUILDERS = {
    KUBERNETES.name: _build_kubernetes,
    ETCD.name: _build_etcd,
    KWOK.name: _build_kwok,
    AGENT_SANDBOX.name: _build_agent_sandbox,
    SANDBOXD.name: _build_sandboxd,
    DISTRIBUTION.name: _build_distribution,
    KUBERNETES_NODE.name: _build_kubernetes_node,
    CONTAINERD.name: _build_containerd,
    CNI_PLUGINS.name: _build_cni_plugins,
    KUBE_ROUTER.name: _build_kube_router,
    GVISOR.name: _build_gvisor,
    HELM.name: _build_helm,
    KREW.name: _build_krew,
}


def build(component: Component, out=sys.stderr) -> float | None:
    """Build one component unless cached; returns the build time in seconds (None when cached).

    Several checkouts share one cache: a lock per component makes a second builder wait for the first
    and then find the component built, instead of both writing the same directory.
    """
    if component.is_built():
        return None
    with cache_lock(f"{component.name}-{component.version}"):
        if component.is_built():
            return None
        return _build_locked(component, out)


@contextlib.contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """An exclusive lock on one entry of the shared cache (held until the block ends)."""
    locks = cache_root() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with (locks / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build_locked(component: Component, out) -> float | None:
    if shutil.which("go") is None:
        raise BuildError("the Go toolchain is needed to build the control plane: install Go (go.dev) first")
    logs = cache_root() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"build-{component.name}-{component.version}.log"
    log.write_text("")
    shutil.rmtree(component.bin_dir, ignore_errors=True)
    component.bin_dir.mkdir(parents=True)
    print(
        f"[devcluster] building {component.name} {component.version} (first time only; log {log}) ...",
        file=out,
        flush=True,
    )
    started = time.monotonic()
    _BUILDERS[component.name](log)
    for binary in component.binaries:
        if not component.path(binary).exists():
            raise BuildError(f"{component.name}: {binary} missing after build; see {log}")
    elapsed = time.monotonic() - started
    (component.bin_dir / ".complete").write_text(json.dumps({"seconds": round(elapsed, 1)}))
    print(f"[devcluster] built {component.name} {component.version} in {elapsed:.0f} s", file=out, flush=True)
    return elapsed


def build_time(component: Component) -> float | None:
    """The recorded first-build time of a cached component."""
    stamp = component.bin_dir / ".complete"
    if not stamp.exists():
        return None
    return float(json.loads(stamp.read_text() or "{}").get("seconds", 0.0))


def components(node: str = "kwok") -> tuple[Component, ...]:
    """What a cluster with this kind of node needs (the control plane always; a real node adds its own)."""
    return COMPONENTS + (NODE_COMPONENTS if node == "real" else ())


def build_all(out=sys.stderr, node: str = "kwok") -> None:
    """Build what a cluster with this kind of node needs, after checking its host packages (minutes saved)."""
    prereqs.ensure(prereqs.for_node(node), out)
    for component in components(node):
        build(component, out)


if __name__ == "__main__":
    from devcluster import errors

    errors.run(build_all)
