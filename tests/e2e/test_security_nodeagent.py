"""The node agent holds no more than it needs (issue 49 item 5), on the real node.

Someone who gets code running in the agent's container (a bug in its HTTP server, a poisoned image) had a
privileged root container: every capability, every device of the node, no seccomp filter. These tests run
what such an attacker would run, in the agent's own container (`kubectl exec`), and read the agent's
process as the node's kernel sees it (/proc on the host, which is the node's).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from devcluster import nodeagent
from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

NO_CAPABILITY = 0
"""The capabilities the agent's process holds: none. Measured on this node (docs/security.md, "49.5 (least
privilege)"): root (uid 0) without any capability runs `runsc checkpoint`, `runsc events --stats`, lists and
deletes images, because every file it touches (runsc's state root, its control sockets, containerd's task
bundles, the checkpoint root) is root's own."""


@pytest.fixture(scope="module")
def agent(kube: Kube, hibernating_operator: OperatorProcess) -> str:
    """The agent serving on the node (its certificate signed by the operator); its pod's name."""
    pods = kube.list("pod", nodeagent.NAMESPACE, f"app.kubernetes.io/name={nodeagent.NAME}")
    (pod,) = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return str(pod["metadata"]["name"])


def _agent_status() -> dict[str, str]:
    """/proc/<pid>/status of the agent's python, on the host (the node's kernel's view)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes()
            if b"agentsession_nodeagent" not in argv or b"--checkpoint-root=/host/checkpoints" not in argv:
                continue
            lines = (proc / "status").read_text().splitlines()
        except OSError:
            continue
        return dict(line.split(":\t", 1) for line in lines if ":\t" in line)
    raise AssertionError("no node agent process on this node")


def test_the_agents_process_holds_no_capability_and_runs_under_seccomp(agent: str) -> None:
    """Before: privileged, CapEff 000001fffeffffff (every capability this machine has: CAP_SYS_ADMIN, ...),
    no seccomp filter, privilege escalation allowed."""
    status = _agent_status()
    assert int(status["CapEff"], 16) == NO_CAPABILITY, status["CapEff"]
    assert int(status["CapPrm"], 16) == NO_CAPABILITY, status["CapPrm"]
    assert int(status["CapBnd"], 16) == NO_CAPABILITY, status["CapBnd"]
    assert status["NoNewPrivs"].strip() == "1", "allowPrivilegeEscalation: false sets no_new_privs"
    assert status["Seccomp"].strip() == "2", "a seccomp filter (RuntimeDefault)"


ESCAPE = """
import ctypes, os, stat, tempfile
def kmsg():
    path = "/dev/kmsg"
    try:
        if not os.path.exists(path):
            path = os.path.join(tempfile.mkdtemp(dir="/dev/shm"), "kmsg")
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 11))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            return "read " + os.read(fd, 8192).decode(errors="replace").split(";", 1)[-1][:60].strip()
        finally:
            os.close(fd)
    except OSError as e:
        return f"refused {type(e).__name__} {e}"
def cgroups():
    libc = ctypes.CDLL(None, use_errno=True)
    target = tempfile.mkdtemp(dir="/dev/shm")
    if libc.mount(b"cgroup", target.encode(), b"cgroup", 0, b"memory") != 0:
        return "refused " + os.strerror(ctypes.get_errno())
    try:
        return "mounted " + " ".join(sorted(os.listdir(target))[:4])
    finally:
        libc.umount2(target.encode(), 2)
print("kmsg:", kmsg())
print("cgroups:", cgroups())
"""


def test_the_agent_cannot_read_the_nodes_kernel_log_nor_mount_its_cgroups(kube: Kube, agent: str) -> None:
    """Attack: code running in the agent's container reaches the node outside anything the agent mounts.
    Before (privileged, measured on this node): it read the node's kernel log (/dev/kmsg: every pod's OOM
    kills with their processes' names, `total_active_file 0` of one) and mounted the node's memory cgroup
    hierarchy at its root (`agentsession-node0 cgroup.clone_children ...`: every pod's cgroup and the host's,
    writable; on cgroup v1 the root's release_agent is the classic escape to the host). Now: no /dev/kmsg,
    mknod refused (no CAP_MKNOD), mount refused (no CAP_SYS_ADMIN; RuntimeDefault's seccomp refuses it too)."""
    answer = kube.run("exec", "-n", nodeagent.NAMESPACE, agent, "--", "python", "-c", ESCAPE).stdout
    found = dict(line.split(": ", 1) for line in answer.strip().splitlines())
    assert found["kmsg"].startswith("refused"), found
    assert found["cgroups"].startswith("refused"), found


def test_the_agents_root_filesystem_is_read_only(kube: Kube, agent: str) -> None:
    """Code running in the agent cannot rewrite the agent (its python package) for the container's life.
    Before: it could."""
    answer = kube.run(
        "exec",
        "-n",
        nodeagent.NAMESPACE,
        agent,
        "--",
        "python",
        "-c",
        "import agentsession_operator, pathlib\n"
        "p = pathlib.Path(agentsession_operator.__file__).with_name('x.py')\n"
        "try:\n    p.write_text('')\n    print('written')\nexcept OSError as e:\n    print('refused', e)",
    ).stdout.strip()
    assert answer.startswith("refused") and "Read-only file system" in answer, answer


# In make test-full only: the DaemonSet leaves and comes back (a minute), and CI is near its 40 minutes.
@pytest.mark.slow
def test_the_agent_runs_only_on_a_node_labelled_for_gvisor(kube: Kube, agent: str) -> None:
    """The agent (root, runsc's and containerd's state mounted) ran on every node, gVisor or not. Now only on
    nodes labelled agentsession.dev/gvisor=true (the chart's nodeAgent.nodeSelector): take the label off the
    node and its agent goes; put it back and it returns. Before: it stayed. (Last in the module: the agent
    fixture's pod is replaced.)"""
    from devcluster.realnode.node import NODE_NAME

    selector = f"app.kubernetes.io/name={nodeagent.NAME}"
    kube.run("label", "node", NODE_NAME, "agentsession.dev/gvisor-")
    try:
        kube.wait_for("the agent gone from the node", lambda: not kube.list("pod", nodeagent.NAMESPACE, selector), 90)
    finally:
        kube.run("label", "node", NODE_NAME, "agentsession.dev/gvisor=true", "--overwrite")
    kube.run("rollout", "status", "-n", nodeagent.NAMESPACE, f"daemonset/{nodeagent.NAME}", "--timeout=120s")
    assert kube.list("pod", nodeagent.NAMESPACE, selector)
