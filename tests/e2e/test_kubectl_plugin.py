"""`kubectl agentsession` end to end: the installed console script against the local control plane,
the real operator, the agent-sandbox controller and python runtime pods."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devcluster import build
from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = [pytest.mark.e2e, pytest.mark.node]  # the runtime in a real pod
EXAMPLES = Path(__file__).parents[2] / "examples"
SCRIPT = Path(sys.executable).parent / "kubectl-agentsession"


def plugin(*args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def ns(kube: Kube, operator: OperatorProcess) -> Iterator[str]:
    name = f"plugin-{uuid.uuid4().hex[:6]}"
    kube.run("create", "namespace", name)
    kube.run("apply", "-n", name, "-f", str(EXAMPLES / "00-python-pool.yaml"))
    yield name
    kube.run("delete", "namespace", name, "--wait=false", check=False)


def test_kubectl_finds_the_plugin_on_path(kube: Kube, ns: str) -> None:
    env = {**os.environ, "PATH": f"{SCRIPT.parent}{os.pathsep}{os.environ['PATH']}"}
    kubectl = str(build.KUBERNETES.path("kubectl"))
    proc = subprocess.run([kubectl, "agentsession", "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and "kubectl agentsession exec" in proc.stdout, proc.stderr
    proc = subprocess.run(
        [kubectl, "agentsession", "list", "-n", ns, "--kubeconfig", kube.kubeconfig],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


def test_create_get_list_exec_cp_wait_delete(ns: str, tmp_path: Path, kube: Kube) -> None:
    created = plugin("create", "demo", "-n", ns, "--warm-pool", "python-pool", "--ttl", "1h", "--wait")
    assert created.returncode == 0, created.stderr
    assert "created" in created.stdout and "demo: Ready" in created.stderr  # progress on stderr

    got = plugin("get", "demo", "-n", ns, "-o", "json")
    assert got.returncode == 0 and json.loads(got.stdout)["status"]["phase"] == "Ready"
    assert yaml.safe_load(plugin("get", "demo", "-n", ns, "-o", "yaml").stdout)["metadata"]["name"] == "demo"
    table = plugin("list", "-n", ns, "-o", "wide").stdout.splitlines()
    assert table[0].split()[:2] == ["NAME", "PHASE"] and table[1].split()[:3] == ["demo", "Ready", "python-pool"]

    # exec: output, and the command's exit code passed through.
    out = plugin("exec", "demo", "-n", ns, "--", "python3", "-c", "print(6 * 7)")
    assert (out.returncode, out.stdout) == (0, "42\n"), out.stderr
    assert plugin("exec", "demo", "-n", ns, "--", "sh", "-c", "exit 7").returncode == 7

    # cp both ways, a file and a directory.
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\n")
    (src / "sub" / "b.bin").write_bytes(bytes(range(256)) * 100)
    assert plugin("cp", str(src), "demo:/tmp/up", "-n", ns).returncode == 0
    assert plugin("exec", "demo", "-n", ns, "--", "cat", "/tmp/up/a.txt").stdout == "alpha\n"
    back = tmp_path / "back"
    assert plugin("cp", "demo:/tmp/up", str(back), "-n", ns).returncode == 0
    assert (back / "a.txt").read_text() == "alpha\n"
    assert (back / "sub" / "b.bin").read_bytes() == bytes(range(256)) * 100
    assert plugin("cp", "demo:/tmp/up/a.txt", str(tmp_path / "one.txt"), "-n", ns).returncode == 0
    assert (tmp_path / "one.txt").read_text() == "alpha\n"

    missing = plugin("cp", "demo:/tmp/nope.txt", str(tmp_path / "x"), "-n", ns)
    assert missing.returncode == 1 and "error:" in missing.stderr

    assert plugin("wait", "demo", "-n", ns, "--for", "Ready", "--timeout", "30").returncode == 0
    assert plugin("delete", "demo", "-n", ns).returncode == 0
    assert plugin("wait", "demo", "-n", ns, "--for", "Deleted", "--timeout", "60").returncode == 0


def test_suspend_and_resume_keep_the_workspace(ns: str) -> None:
    assert (
        plugin("create", "sleepy", "-n", ns, "--warm-pool", "python-pool", "--storage", "1Gi", "--wait").returncode == 0
    )
    assert plugin("exec", "sleepy", "-n", ns, "--", "sh", "-c", "echo kept > /workspace/k").returncode == 0
    suspended = plugin("suspend", "sleepy", "-n", ns, "--wait")
    assert suspended.returncode == 0 and "sleepy: Suspended" in suspended.stderr, suspended.stderr
    resumed = plugin("resume", "sleepy", "-n", ns, "--wait")
    assert resumed.returncode == 0, resumed.stderr
    assert plugin("exec", "sleepy", "-n", ns, "--", "cat", "/workspace/k").stdout == "kept\n"
    assert plugin("delete", "sleepy", "-n", ns).returncode == 0


def test_errors_exit_1_with_a_message(ns: str) -> None:
    for args in (
        ("get", "absent"),
        ("delete", "absent"),
        ("exec", "absent", "--", "true"),
        ("wait", "absent", "--timeout", "1"),
    ):
        proc = plugin("-n", ns, *args)
        assert proc.returncode == 1 and "not found" in proc.stderr, (args, proc.stderr)
    assert plugin("delete", "absent", "--ignore-not-found", "-n", ns).returncode == 0
    assert plugin("list", "-o", "xml").returncode == 2
    assert plugin("list", "--context", "no-such-context").returncode == 1
    # A timeout while waiting for a phase the session will not reach.
    assert plugin("create", "never", "-n", ns, "--warm-pool", "no-such-pool").returncode == 0
    late = plugin("wait", "never", "-n", ns, "--timeout", "2")
    assert late.returncode == 1 and ("timed out" in late.stderr or "Failed" in late.stderr), late.stderr


def test_cp_from_a_hostile_sandbox_never_writes_outside_the_destination(ns: str, tmp_path: Path) -> None:
    """Issue 28 item 1. The sandbox is hostile: a directory named `a<newline>..` made `find` print
    `./a` and `../.bashrc`, and the plugin, splitting on newlines, wrote `<dest>/../.bashrc`: one level up
    from the destination (with `cp NAME:/dir ~/out`, the user's ~/.bashrc)."""
    assert plugin("create", "hostile", "-n", ns, "--warm-pool", "python-pool", "--ttl", "1h", "--wait").returncode == 0
    prepare = (
        "import os; d = '/tmp/dir/a\\n..'; os.makedirs(d)\n"
        "for p in (d + '/.bashrc', '/tmp/.bashrc', '/tmp/dir/ok.txt', '/tmp/dir/b\\x1b[2Jc'):\n"
        "    open(p, 'w').write('owned' if 'bashrc' in p else 'fine')\n"
    )
    made = plugin("exec", "hostile", "-n", ns, "--", "python3", "-c", prepare)
    assert made.returncode == 0, made.stderr
    home = tmp_path / "home"
    home.mkdir()
    out = plugin("cp", "hostile:/tmp/dir", str(home / "out"), "-n", ns)
    assert not (home / ".bashrc").exists(), "the sandbox wrote outside the destination"
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*") if p.is_file()) == ["out/ok.txt"]
    assert out.returncode == 1 and "refused" in out.stderr and "'a\\n../.bashrc'" in out.stderr, out.stderr
    plugin("delete", "hostile", "-n", ns)
