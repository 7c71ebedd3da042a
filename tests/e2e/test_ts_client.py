"""The TypeScript client (client-ts/) end to end: the same cluster, operator and runtime pods as test_client.

Node runs the compiled package (built once per session by `ts_package`): its conformance cases
(client-ts/e2e/conformance.test.ts) and a small driver (client-ts/e2e/driver.ts) through which these tests
attach the TypeScript client to sessions the Python client made, and the reverse.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentsession_api.activity import parse_activity
from agentsession_api.names import ANNOTATION_ACTIVITY
from langchain_k8s_client import AgentSessionSandbox, SessionConflict, SessionManager
from langchain_k8s_client.manager import session_name
from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = [pytest.mark.e2e, pytest.mark.node]  # the runtime in a real pod
REPO = Path(__file__).parents[2]
CLIENT_TS = REPO / "client-ts"
EXAMPLES = REPO / "examples"


def npm(*args: str, timeout: float = 600) -> None:
    subprocess.run(["npm", *args], cwd=CLIENT_TS, check=True, timeout=timeout, capture_output=True, text=True)


@pytest.fixture(scope="session")
def ts_package() -> Path:
    """client-ts built (npm ci only when node_modules is missing or older than the lock file)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("the TypeScript client's tests need Node.js 20+ and npm on PATH")
    modules = CLIENT_TS / "node_modules"
    lock = CLIENT_TS / "package-lock.json"
    if not modules.exists() or modules.stat().st_mtime < lock.stat().st_mtime:
        npm("ci", "--no-audit", "--no-fund")
    npm("run", "build")
    return CLIENT_TS / "dist"


def node_env() -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": os.environ["KUBECONFIG"]}


def activity_of(kube: Kube, namespace: str, name: str) -> str:
    body = kube.get("agentsessions", name, namespace) or {}
    return str((body.get("metadata", {}).get("annotations") or {}).get(ANNOTATION_ACTIVITY, ""))


def drive(dist: Path, request: dict[str, Any], timeout: float = 240) -> dict[str, Any]:
    """One request to client-ts/e2e/driver.ts; its JSON answer."""
    proc = subprocess.run(
        ["node", str(dist / "e2e" / "driver.js"), json.dumps(request)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=node_env(),
    )
    assert proc.returncode == 0, f"driver failed: {proc.stderr[-3000:]}"
    return dict(json.loads(proc.stdout))


def test_conformance_cases(ts_package: Path, pool_namespace: str) -> None:
    """The sandbox standard cases (our port: the npm suite is not published) on AgentSessionSandbox."""
    proc = subprocess.run(
        ["node", "--test", "--test-concurrency=1", str(ts_package / "e2e" / "conformance.test.js")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**node_env(), "TS_E2E_NAMESPACE": pool_namespace, "TS_E2E_POOL": "python-pool"},
    )
    summary = "\n".join(line for line in proc.stdout.splitlines() if line.startswith(("# ", "not ok")))
    assert proc.returncode == 0, f"{summary}\n{proc.stdout[-6000:]}\n{proc.stderr[-2000:]}"
    assert "# fail 0" in proc.stdout, summary


def test_python_session_attached_and_used_by_typescript(ts_package: Path, pool_namespace: str, kube: Kube) -> None:
    with AgentSessionSandbox("py-made", pool_namespace, warm_pool="python-pool", ttl="1h", idle_timeout="10m") as py:
        assert py.upload_files([("/tmp/x/from-python.txt", b"hello from python")])[0].error is None
        reported_by_python = activity_of(kube, pool_namespace, "py-made")
        answer = drive(
            ts_package,
            {
                "namespace": pool_namespace,
                "session": "py-made",
                "options": {"warmPool": "python-pool", "ttl": "1h"},
                "steps": [
                    {"op": "read", "path": "/tmp/x/from-python.txt"},
                    {"op": "execute", "command": "echo ts ran here; hostname"},
                    {"op": "write", "path": "/tmp/x/from-ts.txt", "content": "hello from ts ✓"},
                    {"op": "identity"},
                ],
            },
        )
        assert answer["created"] is False and answer["uid"] == py.uid
        read, executed, wrote, identity = answer["results"]
        assert read == {"error": None, "content": "hello from python"}
        assert executed["exitCode"] == 0 and "ts ran here" in executed["output"]
        assert wrote["error"] is None
        assert identity["hostname"] == py.session.pod_name
        # The pod's own addresses hold the status's pod IP (the kwok node's pods share 127.0.0.0/8): the
        # TypeScript client checked that before the first command, as the Python client does.
        assert any(
            ipaddress.ip_address(ip) in ipaddress.ip_network(net)
            for ip in py.session.pod_ips
            for net in identity["addresses"]
        ), (py.session.pod_ips, identity)
        # The TypeScript client reported activity on this session, in the format the operator reads.
        reported_by_ts = activity_of(kube, pool_namespace, "py-made")
        assert reported_by_ts != reported_by_python and parse_activity(reported_by_ts) is not None
        kube.wait_for(
            "the operator to take the TypeScript client's report",
            lambda: (
                (kube.get("agentsessions", "py-made", pool_namespace) or {}).get("status", {}).get("lastActivityReport")
                == reported_by_ts
            ),
            timeout=30,
        )
        assert py.download_files(["/tmp/x/from-ts.txt"])[0].content == "hello from ts ✓".encode()


def test_typescript_thread_session_attached_by_python(ts_package: Path, pool_namespace: str) -> None:
    thread = f"Conversation #{uuid.uuid4().hex[:4]}: TS then Python"
    answer = drive(
        ts_package,
        {
            "namespace": pool_namespace,
            "thread": thread,
            "options": {"warmPool": "python-pool", "ttl": "1h", "idleTimeout": "10m"},
            "steps": [
                {"op": "write", "path": "/tmp/t/note.md", "content": "written by ts"},
                {"op": "execute", "command": "cat /tmp/t/note.md"},
            ],
        },
    )
    assert answer["created"] is True
    assert answer["name"] == session_name(thread) == answer["nameOf"]
    assert answer["results"][1]["output"].strip() == "written by ts"
    manager = SessionManager(pool_namespace, warm_pool="python-pool", ttl="1h", idle_timeout="10m")
    backend = manager.get(thread)
    try:
        assert backend.id == answer["name"] and backend.uid == answer["uid"] and not backend.created
        assert backend.execute("cat /tmp/t/note.md").output.strip() == "written by ts"
        assert [v.name for v in manager.list()].count(answer["name"]) == 1  # the same managed-by label
    finally:
        backend.close()
        manager.delete(thread)


def test_contradicting_spec_is_a_conflict_in_both_clients(ts_package: Path, pool_namespace: str) -> None:
    drive(
        ts_package,
        {
            "namespace": pool_namespace,
            "session": "conflict",
            "options": {"warmPool": "python-pool", "ttl": "1h"},
            "steps": [],
        },
    )
    try:
        answer = drive(
            ts_package,
            {"namespace": pool_namespace, "session": "conflict", "options": {"ttl": "2h"}, "steps": []},
        )
        assert answer["error"] == "SessionConflict" and "spec.ttl" in answer["message"]
        with pytest.raises(SessionConflict):
            AgentSessionSandbox("conflict", pool_namespace, ttl="2h")
    finally:
        SessionManager(pool_namespace)._store.delete(pool_namespace, "conflict")


def test_typescript_forks_a_python_session_with_the_source_suspended(ts_package: Path, kube: Kube) -> None:
    """fork() in TypeScript as in Python (spec.forkFrom, the source suspended for the copy and resumed after):
    a file the Python client wrote in the source's volume is in the fork."""
    ns = f"tsfork-{uuid.uuid4().hex[:6]}"
    kube.run("create", "namespace", ns)
    mount = [{"name": "workspace", "mountPath": "/workspace"}]
    template = manifests.template(
        "py",
        manifests.PYTHON_RUNTIME_IMAGE,
        vct_policy="Allowed",
        volume_mounts=mount,
        volumes=[{"name": "workspace", "emptyDir": {}}],
    )
    kube.apply(template, manifests.warm_pool("fork-pool", "py"), namespace=ns)
    volume = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    try:
        with AgentSessionSandbox(
            "src",
            ns,
            warm_pool="fork-pool",
            ttl="1h",
            volume_claim_templates=[{"metadata": {"name": "workspace"}, "spec": volume}],
        ) as source:
            assert source.write("/workspace/notes.txt", "written by python").error is None
            steps = [{"op": "fork", "name": "src-ts-fork", "suspendSource": True, "read": "/workspace/notes.txt"}]
            answer = drive(ts_package, {"namespace": ns, "session": "src", "steps": steps}, timeout=400)
            [forked] = answer["results"]
            assert forked["created"] is True and forked["content"] == "written by python", forked
            body = kube.get("agentsessions", "src-ts-fork", ns) or {}
            assert body["spec"]["forkFrom"] == {"name": "src"}
            assert not (kube.get("agentsessions", "src", ns) or {})["spec"].get("suspend")  # resumed after the copy
            assert source.execute("cat /workspace/notes.txt").output == "written by python"
    finally:
        kube.run("delete", "namespace", ns, "--wait=false", check=False)


def test_express_example_serves_a_thread(ts_package: Path, pool_namespace: str) -> None:
    """examples/typescript as its README comment runs it (npm ci, tsc, node), on a loopback port: one POST runs a
    command in the thread's session, which the Python client then finds by the same thread id; DELETE ends it."""
    import socket
    import urllib.request

    where = EXAMPLES / "typescript"
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=where, check=True, capture_output=True, timeout=600)
    subprocess.run(["npx", "tsc", "-p", "."], cwd=where, check=True, capture_output=True, timeout=300)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**node_env(), "PORT": str(port), "NAMESPACE": pool_namespace, "WARM_POOL": "python-pool"}
    server = subprocess.Popen(
        ["node", "dist/express-server.js"],
        cwd=where,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"

    def call(method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(base + path, data=data, method=method)
        request.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=240) as answer:
                return answer.status, dict(json.loads(answer.read()))
        except urllib.error.HTTPError as refused:
            return refused.code, dict(json.loads(refused.read()))

    thread = f"express-{uuid.uuid4().hex[:4]}"
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == f"listening on 127.0.0.1:{port}"
        status, ran = call("POST", f"/threads/{thread}/run", {"command": "echo from express; hostname"})
        assert status == 200 and ran["exitCode"] == 0 and ran["output"].startswith("from express\n"), ran
        assert call("POST", f"/threads/{thread}/run", {})[0] == 400
        backend = SessionManager(pool_namespace).get(thread)  # the same session, by the thread id
        try:
            assert backend.session.pod_name == ran["output"].split()[-1] and not backend.created
        finally:
            backend.close()
        assert call("DELETE", f"/threads/{thread}") == (200, {"deleted": True})
    finally:
        server.terminate()
        try:
            server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
        SessionManager(pool_namespace).delete(thread)


def test_readme_typescript_block_runs(ts_package: Path, kube: Kube, operator: OperatorProcess, tmp_path: Path) -> None:
    """The README's typescript block, compiled as written against the built package, in namespace team-a."""
    import re

    readme = (REPO / "README.md").read_text()
    [block] = re.findall(r"^```typescript\n(.*?)^```", readme, re.MULTILINE | re.DOTALL)
    kube.run("create", "namespace", "team-a", check=False)
    kube.run("apply", "-n", "team-a", "-f", str(EXAMPLES / "00-python-pool.yaml"))
    # Inside the package directory, so `@agentsession/deepagents` resolves to it (a package's own name).
    where = CLIENT_TS / "dist-readme"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir()
    try:
        (where / "block.ts").write_text(block)
        flags = ["--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", "--strict"]
        flags += ["--skipLibCheck", "--rootDir", str(where), "--outDir", str(where)]
        subprocess.run(
            ["npx", "tsc", *flags, str(where / "block.ts")],
            cwd=CLIENT_TS,
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
        proc = subprocess.run(
            ["node", str(where / "block.js")], capture_output=True, text=True, timeout=300, env=node_env()
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        lines = proc.stdout.splitlines()
        assert lines[0].startswith("42 0 ") and "# notes" in proc.stdout, proc.stdout
        assert lines[-1] == f"{session_name('user-42/conversation-7')} hi from TypeScript", proc.stdout
    finally:
        shutil.rmtree(where, ignore_errors=True)
