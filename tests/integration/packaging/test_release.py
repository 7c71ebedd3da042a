"""`make release` and the README's release block, as a user runs them (issue 52 item 1): from a fresh folder.

`python -m devcluster.release` (what `make release` runs) builds every artifact into a new folder; then the
README's own lines: the client installed from its wheels into a new virtualenv (pip from PyPI for its
dependencies) and imported, the npm tarball installed with its peers into an empty project, the packaged
chart rendered with the README's --set, the manifest with the README's registry substitution, the image
archive read by skopeo. The two lines that need a registry and a cluster (skopeo copy, kubectl apply) are
checked for what they name: the files exist, the substitution hits the image.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
import yaml

from devcluster import build, prereqs, release, versions

ROOT = Path(__file__).resolve().parents[3]


def _readme_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    (block,) = [b for b in blocks if b.startswith("make release")]
    return [line.split("  #")[0].strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prereqs.ensure([prereqs.IMAGES])
    out = tmp_path_factory.mktemp("release") / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "devcluster.release", "--out", str(out)], capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _line(prefix: str) -> list[str]:
    (line,) = [line for line in _readme_block() if line.startswith(prefix)]
    return shlex.split(line)


def test_every_artifact_is_there_with_its_checksum(dist: Path) -> None:
    tag = release.version()
    expected = {
        f"python/{name}-{tag}{suffix}"
        for name in ("agentsession_api", "langchain_k8s_client", "agentsession_operator")
        for suffix in ("-py3-none-any.whl", ".tar.gz")
    } | {f"npm/agentsession-deepagents-{tag}.tgz", f"install/agentsession-{tag}.yaml", f"images/operator-{tag}.oci.tar"}
    expected |= {f"krew/kubectl-agentsession-{tag}.tar.gz", "krew/agentsession.yaml"}
    present = {str(p.relative_to(dist)) for p in dist.rglob("*") if p.is_file()}
    assert expected <= present, expected - present
    assert any(p.startswith("chart/agentsession-") for p in present) and "LICENSE" in present
    sums = dict(reversed(line.split("  ", 1)) for line in (dist / "SHA256SUMS").read_text().splitlines())
    assert set(sums) == present - {"SHA256SUMS"}
    for wheel in (dist / "python").glob("*.whl"):
        assert any(n.endswith("licenses/LICENSE") for n in zipfile.ZipFile(wheel).namelist()), wheel


def test_the_readme_pip_line_installs_the_client_from_the_wheels(dist: Path, tmp_path: Path) -> None:
    venv.EnvBuilder(with_pip=True).create(tmp_path / "venv")
    python = tmp_path / "venv" / "bin" / "python"
    args = _line("pip install")[2:]
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
        cwd=dist.parent,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    code = "import langchain_k8s_client as c; print(c.__version__, c.AgentSessionSandbox.__name__)"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, cwd="/")
    assert out.stdout.split() == [release.version(), "AgentSessionSandbox"], out.stderr[-2000:]


def test_the_readme_krew_line_installs_the_plugin_that_kubectl_runs(dist: Path, tmp_path: Path) -> None:
    """A user's krew (its own KREW_ROOT, home and cache here) installs the plugin from the release's two files;
    kubectl finds it on PATH, and its first run installs the client from the archive's wheels."""
    tag = release.version()
    manifest = yaml.safe_load((dist / "krew" / "agentsession.yaml").read_text())
    archive = dist / "krew" / f"kubectl-agentsession-{tag}.tar.gz"
    (platform,) = manifest["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert manifest["spec"]["version"] == f"v{tag}" and platform["bin"] == "kubectl-agentsession"
    build.build(build.KREW)
    build.build(build.KUBERNETES)
    root = tmp_path / "krew"
    env = {
        "PATH": f"{root / 'bin'}:{os.environ['PATH']}",
        "KREW_ROOT": str(root),
        "HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    words = _line("kubectl krew install")
    installed = subprocess.run(
        [str(build.KREW.path("krew")), *words[2:]],
        cwd=dist.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert installed.returncode == 0 and "Installed plugin: agentsession" in installed.stderr, installed.stderr
    for _ in range(2):  # the first run installs the client, the second finds it
        ran = subprocess.run(
            [str(build.KUBERNETES.path("kubectl")), "agentsession", "--version"],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert ran.returncode == 0 and ran.stdout.startswith(f"kubectl agentsession {tag} "), ran.stderr[-3000:]
    (made,) = (tmp_path / "cache" / "kubectl-agentsession").iterdir()  # one, complete: no partial left
    assert made.name.startswith(f"{tag}-py3.") and (made / "langchain_k8s_client").is_dir(), made


def test_the_readme_npm_line_installs_the_package_with_its_peers(dist: Path, tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text('{"name": "app", "version": "1.0.0", "type": "module"}\n')
    args = [str(dist.parent / a) if a.startswith("dist/") else a for a in _line("npm install")[2:]]
    proc = subprocess.run(["npm", "install", "--no-audit", "--no-fund", *args], cwd=app, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    code = "import('@agentsession/deepagents').then(m => console.log(typeof m.AgentSessionSandbox.create))"
    out = subprocess.run(["node", "-e", code], cwd=app, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "function", out.stderr[-2000:]


def test_the_readme_helm_line_renders_the_packaged_chart_with_your_image(dist: Path) -> None:
    words = _line("helm install")
    build.build(build.HELM)
    chart = dist.parent / words[3]
    args = ["template", words[2], str(chart), *words[4:]]
    args = [a for a in args if a != "--create-namespace"]  # an install flag, not template's
    args += ["--kube-version", versions.KUBERNETES]  # helm template assumes 1.20 without a cluster
    proc = subprocess.run([str(build.HELM.path("helm")), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    images = {c["image"] for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "Deployment"
              for c in d["spec"]["template"]["spec"]["containers"]}  # fmt: skip
    assert images == {f"registry.example.com/agentsession/operator:{release.version()}"}, images


def test_the_manifest_and_the_image_archive_are_what_the_readme_names(dist: Path) -> None:
    tag = release.version()
    sed = _line("sed")
    assert sed[2] == f"dist/install/agentsession-{tag}.yaml"
    expression = sed[1]  # s#OLD#NEW#
    _, old, new, _ = expression.split("#")
    manifest = (dist / "install" / f"agentsession-{tag}.yaml").read_text().replace(old, new)
    docs = [d for d in yaml.safe_load_all(manifest) if d]
    kinds = {d["kind"] for d in docs}
    assert {"CustomResourceDefinition", "Deployment", "ValidatingWebhookConfiguration", "ClusterRole"} <= kinds
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == f"{new}{tag}"
    copy = _line("skopeo copy")
    archive = dist.parent / copy[2].removeprefix("oci-archive:")
    assert archive.is_file()
    with tarfile.open(archive) as tar:  # an OCI image layout: skopeo copies it to any registry
        assert {"oci-layout", "index.json"} <= {Path(n).name for n in tar.getnames()}
