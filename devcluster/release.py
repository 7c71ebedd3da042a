"""`make release`: every artifact a user installs from, built here into one folder (issue 52 item 1).

    dist/
      python/     agentsession_api, langchain_k8s_client, agentsession_operator, agentsession_nodeagent: a
                  wheel and an sdist each
      npm/        agentsession-deepagents-VERSION.tgz (client-ts, npm pack)
      images/     operator-VERSION.oci.tar (the operator's image; the node agent's wheel is installed in it too), an OCI
                  archive: `skopeo copy oci-archive:... docker://YOUR-REGISTRY/agentsession/operator:VERSION`
      install/    agentsession-VERSION.yaml: `kubectl kustomize config/` rendered whole (CRDs, RBAC, pins,
                  webhook, Deployment), the image named ghcr.io/agentsession/operator:VERSION
      chart/      agentsession-CHART_VERSION.tgz (helm package charts/agentsession)
      krew/       kubectl-agentsession-VERSION.tar.gz (the plugin: client/krew's launcher, the api and client
                  wheels) and agentsession.yaml, its krew manifest with the archive's sha256
      LICENSE, SHA256SUMS

The version comes from one place, api/pyproject.toml (tests/unit/test_versions.py keeps the other
packages, the chart's appVersion and client-ts equal to it). Nothing is pushed or published.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

from devcluster import build, prereqs
from devcluster.errors import DevclusterError, report
from devcluster.paths import REPO_ROOT

PROJECTS = ("api", "client", "operator", "nodeagent")


def version() -> str:
    return str(tomllib.loads((REPO_ROOT / "api" / "pyproject.toml").read_text())["project"]["version"])


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise DevclusterError(f"{' '.join(cmd[:3])} failed ({proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")
    return proc.stdout


def python_distributions(out: Path) -> list[Path]:
    """A wheel and an sdist of each project, built from a clean copy (the tree stays as it is)."""
    out.mkdir(parents=True, exist_ok=True)
    code = "from setuptools import build_meta as b; import sys; d = sys.argv[1]; b.build_wheel(d); b.build_sdist(d)"
    for project in PROJECTS:
        work = out / f".build-{project}"
        shutil.rmtree(work, ignore_errors=True)
        ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
        shutil.copytree(REPO_ROOT / project, work, ignore=ignore)
        _run([sys.executable, "-c", code, str(out.resolve())], cwd=work)
        shutil.rmtree(work)
    return sorted(p for p in out.iterdir() if p.suffix in (".whl", ".gz"))


def npm_package(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    _run(["npm", "pack", "--silent", "--pack-destination", str(out.resolve())], cwd=REPO_ROOT / "client-ts")
    (tarball,) = out.glob("*.tgz")
    return tarball


def install_manifest(out: Path, tag: str) -> Path:
    """config/ rendered whole, the image at this version."""
    out.mkdir(parents=True, exist_ok=True)
    rendered = _run([str(build.KUBERNETES.path("kubectl")), "kustomize", str(REPO_ROOT / "config")])
    target = out / f"agentsession-{tag}.yaml"
    target.write_text(re.sub(r"(ghcr\.io/agentsession/operator):[\w.-]+", rf"\1:{tag}", rendered))
    return target


def chart(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    build.build(build.HELM)
    _run([str(build.HELM.path("helm")), "package", str(REPO_ROOT / "charts" / "agentsession"), "-d", str(out)])
    (packaged,) = out.glob("*.tgz")
    return packaged


def operator_image(out: Path, tag: str) -> Path:
    from devcluster import images

    out.mkdir(parents=True, exist_ok=True)
    images.build_image(images.OPERATOR)
    target = out / f"operator-{tag}.oci.tar"
    shutil.copyfile(images.OPERATOR.archive(), target)
    return target


def krew_plugin(out: Path, tag: str, wheels: list[Path]) -> list[Path]:
    """The plugin's archive (launcher, VERSION, LICENSE, the api and client wheels) and its krew manifest."""
    out.mkdir(parents=True, exist_ok=True)
    source = REPO_ROOT / "client" / "krew"
    archive = out / f"kubectl-agentsession-{tag}.tar.gz"
    (out / "VERSION").write_text(tag + "\n")
    mine = [w for w in wheels if w.name.startswith(("agentsession_api-", "langchain_k8s_client-"))]
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source / "kubectl-agentsession", "kubectl-agentsession")
        tar.add(out / "VERSION", "VERSION")
        tar.add(REPO_ROOT / "LICENSE", "LICENSE")
        for wheel in sorted(mine):
            tar.add(wheel, f"wheels/{wheel.name}")
    (out / "VERSION").unlink()
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    manifest = (source / "agentsession.yaml").read_text()
    manifest = manifest.replace("@VERSION@", tag).replace("@SHA256@", sha)
    target = out / "agentsession.yaml"
    target.write_text(manifest)
    return [archive, target]


def checksums(out: Path) -> Path:
    lines = []
    for path in sorted(p for p in out.rglob("*") if p.is_file() and p.name != "SHA256SUMS"):
        lines.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.relative_to(out)}")
    target = out / "SHA256SUMS"
    target.write_text("\n".join(lines) + "\n")
    return target


def release(out: Path, with_images: bool = True) -> list[Path]:
    tag = version()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    made = [*python_distributions(out / "python"), npm_package(out / "npm")]
    made += krew_plugin(out / "krew", tag, [p for p in made if p.suffix == ".whl"])
    made += [install_manifest(out / "install", tag), chart(out / "chart")]
    if with_images:
        made.append(operator_image(out / "images", tag))
    shutil.copyfile(REPO_ROOT / "LICENSE", out / "LICENSE")
    made += [out / "LICENSE", checksums(out)]
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.release", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "dist")
    parser.add_argument("--no-images", action="store_true", help="skip the image (it needs root and buildah)")
    args = parser.parse_args(argv)
    try:
        # Every host package first (npm; buildah and skopeo for the image): one line, not a traceback later.
        prereqs.ensure([prereqs.NODE] if args.no_images else [prereqs.NODE, prereqs.IMAGES])
        made = release(args.out, with_images=not args.no_images)
    except DevclusterError as exc:
        return report(exc)
    print(f"release {version()} in {args.out}:")
    for path in made:
        print(f"  {path.relative_to(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
