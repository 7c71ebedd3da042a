"""Sessions under gVisor on the real node (issue 29): the hardened sample template as shipped
(`runtimeClassName: gvisor`), reached by the client as a user's agent reaches it.

Where a property is shared with runc, the runc test is parametrized by runtime instead (conftest.RUNTIMES):
test_real_node.py (pods, security context, memory limit, NetworkPolicy), test_network_isolation.py (tenant B
refused, the owner's client answered, egress as the policy says) and test_lifecycle.py (idle suspend and
resume with the workspace kept). Here: what only a session on the sample template shows.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from deepagents.backends.protocol import SandboxBackendProtocol

from devcluster import build
from devcluster.cluster import Cluster
from devcluster.realnode.configs import NodeDirs
from langchain_k8s_client import AgentSessionSandbox
from testkit import manifests
from tests.conformance import Deepagents07SandboxTests
from tests.e2e.conftest import Kube, OperatorProcess
from tests.e2e.test_fork import workspace
from tests.e2e.test_install import POOL_SAMPLE, TEMPLATE_SAMPLE, by_kind, load, restricted

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]
POOL = "python-pool"
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def gvisor_namespace(kube: Kube, operator: OperatorProcess) -> Iterator[str]:
    """The sample template and pool as shipped (one warm sandbox is proof enough), in a namespace that
    enforces Pod Security restricted, as the sample's comments ask."""
    name = f"gvisor-{uuid.uuid4().hex[:6]}"
    kube.run("create", "namespace", name)
    restricted(kube, name)
    template = by_kind(load(TEMPLATE_SAMPLE), "SandboxTemplate")
    assert template["spec"]["podTemplate"]["spec"]["runtimeClassName"] == manifests.GVISOR
    pool = by_kind(load(POOL_SAMPLE), "SandboxWarmPool")
    pool["spec"]["replicas"] = 1
    kube.apply(template, pool, namespace=name)
    # The first session adopts this one (warm); a pod of the class that cannot start shows up here.
    kube.wait_for(
        "a Ready warm gVisor sandbox",
        lambda: any(kube.is_true(s, "Ready") for s in kube.list("sandboxes", name)),
        timeout=180,
    )
    yield name
    kube.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def sandbox(gvisor_namespace: str) -> Iterator[AgentSessionSandbox]:
    with AgentSessionSandbox("gv", gvisor_namespace, warm_pool=POOL, ttl="1h") as backend:
        yield backend


def _runsc_state(cluster: Cluster, container_id: str) -> dict[str, Any]:
    """What the node's runsc says of a container (containerd's CRI namespace is k8s.io)."""
    root = NodeDirs(cluster.paths.root / "node").runsc_root / "k8s.io"
    proc = subprocess.run(
        [str(build.GVISOR.path("runsc")), f"--root={root}", "state", container_id.removeprefix("containerd://")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def test_the_sandbox_runs_on_gvisors_kernel_not_the_hosts(
    sandbox: AgentSessionSandbox, kube: Kube, cluster: Cluster
) -> None:
    view = sandbox.wait_ready()
    pod = kube.get("pod", view.pod_name or "", view.namespace)
    assert pod is not None and pod["spec"]["runtimeClassName"] == manifests.GVISOR
    # From inside: gVisor's own kernel (it reports Linux 4.4.0) and its own boot log, not the host's.
    release = sandbox.execute("uname -r")
    assert release.exit_code == 0 and release.output.strip() != os.uname().release, release
    dmesg = sandbox.execute("dmesg")
    assert dmesg.exit_code == 0 and "gVisor" in dmesg.output, dmesg
    # From the node: runsc runs the container (its sandbox, not a runc container).
    (status,) = pod["status"]["containerStatuses"]
    assert _runsc_state(cluster, status["containerID"])["status"] == "running"


def test_warm_and_cold_sessions_become_ready(sandbox: AgentSessionSandbox, gvisor_namespace: str, kube: Kube) -> None:
    warm = kube.get("agentsession", "gv", gvisor_namespace)
    assert warm is not None and warm["status"]["launchType"] == "warm", warm["status"]
    # env forces a cold start: a sandbox created for this session.
    with AgentSessionSandbox("gv-cold", gvisor_namespace, warm_pool=POOL, ttl="10m", env={"MODE": "cold"}) as cold:
        kernel = sandbox.execute("uname -r").output.strip()
        assert cold.execute("echo $MODE; uname -r").output.split() == ["cold", kernel]
        body = kube.get("agentsession", "gv-cold", gvisor_namespace)
        assert body is not None and body["status"]["launchType"] == "cold", body["status"]


def test_execute_files_grep_and_glob(sandbox: AgentSessionSandbox) -> None:
    assert sandbox.execute("true").exit_code == 0
    payload = os.urandom(10 * MIB)
    (up,) = sandbox.upload_files([("/workspace/big.bin", payload)])
    assert up.error is None, up
    (down,) = sandbox.download_files(["/workspace/big.bin"])
    assert down.error is None and down.content == payload
    made = sandbox.execute("head -c 10485760 /dev/urandom > /workspace/made.bin && sha256sum /workspace/made.bin")
    (fetched,) = sandbox.download_files(["/workspace/made.bin"])
    assert fetched.content is not None and hashlib.sha256(fetched.content).hexdigest() == made.output.split()[0]
    assert sandbox.write("/workspace/src/a.py", "def needle():\n    pass\n").error is None
    assert sandbox.write("/workspace/src/b.txt", "no match here\n").error is None
    found = sandbox.grep("needle", "/workspace/src")
    assert found.error is None and [(m["path"], m["line"]) for m in found.matches or []] == [("/workspace/src/a.py", 1)]
    globbed = sandbox.glob("*.py", "/workspace/src")
    assert globbed.error is None and [m["path"] for m in globbed.matches or []] == ["/workspace/src/a.py"]


def test_read_only_root_and_non_root_user(sandbox: AgentSessionSandbox) -> None:
    assert sandbox.execute("id -u").output.strip() == "1000"
    # /app belongs to the runtime's user: only the read-only root keeps it out. (gVisor checks permissions
    # first: /etc/x, root's, says "Permission denied" there, where runc says "Read-only file system".)
    touched = sandbox.execute("touch /app/x")
    assert touched.exit_code != 0 and "Read-only file system" in touched.output, touched
    assert sandbox.execute("touch /workspace/x").exit_code == 0


# The memory limit and the pids limit under gVisor are tested exactly in test_session_limits.py (the hog
# or the fork bomb ends the whole sandbox there, the call raises TransportError, the kubelet restarts the
# container and the session answers again; docs/gvisor.md), in make test-full: not waited out twice here.


def test_fork_of_a_gvisor_session(gvisor_namespace: str) -> None:
    with AgentSessionSandbox(
        "gv-src", gvisor_namespace, warm_pool=POOL, ttl="10m", volume_claim_templates=workspace()
    ) as source:
        assert source.write("/workspace/notes.txt", "written in the source\n").error is None
        with source.fork("gv-src-fork", keep=False) as fork:
            assert fork.execute("cat /workspace/notes.txt").output == "written in the source\n"
            assert fork.execute("sh -c 'echo changed > /workspace/notes.txt'").exit_code == 0
            assert source.execute("cat /workspace/notes.txt").output == "written in the source\n"
            assert fork.execute("uname -r").output == source.execute("uname -r").output


class TestConformanceUnderGvisor(Deepagents07SandboxTests):
    """langchain-tests' standard sandbox suite against a session on the gVisor sample template."""

    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, gvisor_namespace: str) -> Iterator[SandboxBackendProtocol]:
        with AgentSessionSandbox("gv-conformance", gvisor_namespace, warm_pool=POOL, ttl="1h") as backend:
            yield backend
