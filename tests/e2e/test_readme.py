"""Every code block of the README runs: python against the local cluster, YAML and kubectl as a server dry run,
and the quick start's `make demo` (its module) for real. (`make test` is what CI runs.)"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = [pytest.mark.e2e, pytest.mark.node, pytest.mark.bothnodes]  # the runtime in a real pod: both nodes
ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```(\w+)\n(.*?)^```", README, re.MULTILINE | re.DOTALL)
NAMESPACE = "team-a"


def blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCKS if lang == language]


def test_the_readme_has_the_blocks_this_file_runs() -> None:
    # The typescript block runs in tests/e2e/test_ts_client.py (it needs the built TypeScript package).
    assert {lang for lang, _ in BLOCKS} <= {"sh", "python", "yaml", "mermaid", "typescript"}
    assert len(blocks("python")) == 4 and len(blocks("yaml")) == 2 and len(blocks("sh")) == 5
    # The release block (sh 1) runs in tests/integration/packaging/test_release.py (no cluster needed).
    assert blocks("sh")[1].split()[:2] == ["make", "release"]


@pytest.fixture(scope="module")
def team_a(kube: Kube, operator: OperatorProcess) -> Iterator[str]:
    # A fresh namespace (a previous run's may still be terminating).
    kube.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=120s")
    kube.run("create", "namespace", NAMESPACE)
    kube.run("apply", "-n", NAMESPACE, "-f", str(ROOT / "examples" / "00-python-pool.yaml"))
    yield NAMESPACE
    kube.run("delete", "namespace", NAMESPACE, "--wait=false", check=False)


@pytest.mark.parametrize("index", range(4))
def test_python_blocks_run(team_a: str, index: int) -> None:
    code = blocks("python")[index]
    if "FastAPI" in code:
        # Define the app as written, then serve two requests for the same thread (two "replicas").
        code += (
            "\nfrom fastapi.testclient import TestClient\n"
            "for _ in range(2):\n"
            "    r = TestClient(app).post('/threads/readme-thread/run', params={'command': 'echo ok'})\n"
            "    assert r.status_code == 200 and r.json() == {'output': 'ok\\n', 'exit_code': 0}, r.text\n"
            "sessions.delete('readme-thread')\n"
        )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if "readme-one-shot" in code:
        assert "42" in proc.stdout and "# notes" in proc.stdout
    if "readme-fork-a" in code:
        assert proc.stdout == "# plan\napproach B\n\n# plan\n\n", proc.stdout


def test_yaml_blocks_pass_server_dry_run(kube: Kube, team_a: str) -> None:
    for body in blocks("yaml"):
        doc = yaml.safe_load(body)
        proc = kube.run("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(doc))
        assert "(server dry run)" in proc.stdout


@pytest.fixture
def config_webhook_applies(kube: Kube, operator: OperatorProcess) -> Iterator[None]:
    """The shared host-process operator's webhook configuration has config/'s name but its own URL, and one
    webhook cannot name both a URL and config/'s Service: out of the way during the dry runs, then back."""
    operator.stop()
    kube.run("delete", "validatingwebhookconfiguration", "agentsession.dev", "--ignore-not-found")
    try:
        yield
    finally:
        operator.start()  # recreates its configuration and patches its URL in


def test_install_commands_pass_server_dry_run(kube: Kube, team_a: str, config_webhook_applies: None) -> None:
    commands = [line.split("#")[0].split() for line in blocks("sh")[2].splitlines() if line.startswith("kubectl")]
    assert len(commands) == 3
    for namespace in ("agentsession-system", "agent-apps"):
        kube.run("create", "namespace", namespace, check=False)
    for command in commands:
        proc = kube.run(*command[1:], "--dry-run=server")
        assert "(server dry run)" in proc.stdout


def test_quick_start_demo_runs(cluster: object, operator: OperatorProcess) -> None:
    """`make demo` runs `python -m examples.demo_agent`; on a running cluster it leaves the cluster up."""
    assert blocks("sh")[0].split()[:2] == ["make", "demo"]
    assert "$(PY) -m examples.demo_agent" in (ROOT / "Makefile").read_text()
    proc = subprocess.run(
        [sys.executable, "-m", "examples.demo_agent"], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    # The demo's own operator patched its URL into the webhook configuration: patch ours back in.
    operator.stop()
    operator.start()
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "count: 15" in proc.stdout and "kubectl get agentsessions" in proc.stdout


def test_helm_commands_render_and_pass_server_dry_run(kube: Kube, team_a: str, config_webhook_applies: None) -> None:
    from devcluster import build, versions

    build.build(build.HELM)
    helm = str(build.HELM.path("helm"))
    lines = [line.split("#")[0].split() for line in blocks("sh")[3].splitlines() if line.startswith("helm")]
    assert [line[1] for line in lines] == ["install", "template"]
    # The dev cluster already has the operator's namespace and ClusterRole (not Helm's, which helm install
    # refuses to adopt, even in a dry run): the install line's chart is linted, its objects go to the server
    # below. A real `helm install` belongs on a cluster without the operator installed (the real node).
    lint_args = [a for a in lines[0][4:] if a != "--create-namespace"]  # an install flag, not lint's
    install = subprocess.run([helm, "lint", lines[0][3], *lint_args], capture_output=True, text=True, cwd=ROOT)
    assert install.returncode == 0, install.stdout + install.stderr
    rendered = subprocess.run(
        [helm, *lines[1][1:], "--kube-version", versions.KUBERNETES], capture_output=True, text=True, cwd=ROOT
    )
    assert rendered.returncode == 0, rendered.stderr
    proc = kube.run("apply", "--dry-run=server", "-f", "-", input=rendered.stdout)
    assert "(server dry run)" in proc.stdout


def test_kubectl_plugin_commands_run(team_a: str) -> None:
    script = Path(sys.executable).parent / "kubectl-agentsession"
    for line in blocks("sh")[4].splitlines():
        words = shlex.split(line)
        assert words[:2] == ["kubectl", "agentsession"], line
        proc = subprocess.run([str(script), *words[2:]], capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert proc.returncode == 0, (line, proc.stderr)
        if "print(6 * 7)" in line:
            assert proc.stdout == "42\n"
    assert sorted(p.name for p in Path("/tmp/samples-back").iterdir()) == sorted(
        p.name for p in (ROOT / "config" / "samples").iterdir() if p.is_file()
    )
