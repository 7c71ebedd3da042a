"""idleAction Hibernate end to end on the real node (issue 33): the node agent's checkpoint, the wake's restore.

The operator (a host process, as in the other tests) runs with `--node-agent` against devcluster's agent
DaemonSet (devcluster/nodeagent.py: config/components/nodeagent with this node's paths). A gVisor session
with `idleAction: Hibernate` runs a python process holding a value only in its memory (it made it up
itself, and answers it on a local socket) and a background `sleep 100000`; it goes idle, the agent
checkpoints its sandbox, the pod goes away; the client's next call (langchain_k8s_client, as users call)
wakes it, the shim restores the new pod from the image, and the same process answers the same value.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import ssl
from pathlib import Path
from typing import Any

import pytest

from agentsession_api import phases
from agentsession_operator.decisions.hibernate import checkpoint_prefix
from devcluster import nodeagent
from devcluster.cluster import Cluster
from devcluster.realnode.configs import RESTORE_ANNOTATION, NodeDirs
from langchain_k8s_client import AgentSessionSandbox
from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

IDLE = "6s"
WORKSPACE = [
    {
        "metadata": {"name": "workspace"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
]
# A value made up by the process itself (never on disk, never in its argv), answered on 127.0.0.1:7777 with
# its pid; a background sleep; a file in the root filesystem and one in the workspace volume.
HOLDER = r"""
import os, secrets, socket
value = secrets.token_hex(8)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 7777)); s.listen(4)
while True:
    c, _ = s.accept(); c.sendall(f"{value} {os.getpid()}\n".encode()); c.close()
"""
ASK = (
    "python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', 7777), 5); "
    'print(s.recv(100).decode().strip())"'
)


def _pool(kube: Kube, namespace: str, name: str, runtime: str | None) -> None:
    kube.apply(
        manifests.template(
            name,
            manifests.PYTHON_RUNTIME_IMAGE,
            vct_policy="Allowed",
            volume_mounts=[{"name": "workspace", "mountPath": "/workspace"}],
            volumes=[{"name": "workspace", "emptyDir": {}}],
            runtime_class=runtime,
        ),
        manifests.warm_pool(name, name, 0),
        namespace=namespace,
    )


def _status(kube: Kube, name: str, namespace: str) -> dict[str, Any]:
    return dict((kube.get("agentsession", name, namespace) or {}).get("status") or {})


def _events(kube: Kube, name: str, namespace: str) -> set[str]:
    selector = f"involvedObject.kind=AgentSession,involvedObject.name={name}"
    events = json.loads(kube.run("get", "events", "-n", namespace, "--field-selector", selector, "-o", "json").stdout)
    return {e["reason"] for e in events["items"]}


def _run(backend: AgentSessionSandbox, command: str, timeout: int | None = None) -> str:
    """A command through the client. Before the idle wait, a short `timeout`: the client reports the session
    busy for a command's whole timeout (default minutes), which would put the idle deadline off as long."""
    result = backend.execute(command, timeout=timeout)
    assert result.exit_code == 0, result
    return str(result.output).strip()


def test_a_hibernated_session_wakes_with_its_processes(
    cluster: Cluster, kube: Kube, namespace: str, hibernating_operator: OperatorProcess
) -> None:
    _pool(kube, namespace, "gv", manifests.GVISOR)
    backend = AgentSessionSandbox(
        "sleeper",
        namespace,
        warm_pool="gv",
        ttl="20m",
        idle_timeout=IDLE,
        idle_action="Hibernate",
        volume_claim_templates=WORKSPACE,
    )
    view = backend.wait_ready()
    pod = view.pod_name or ""
    started = _run(
        backend,
        f"cat > /tmp/holder.py <<'EOF'\n{HOLDER}\nEOF\n"
        "nohup python3 /tmp/holder.py >/dev/null 2>&1 & "
        "nohup sleep 100000 >/dev/null 2>&1 & echo $! > /tmp/sleep.pid; "
        "echo rootfs-kept > /tmp/marker; echo workspace-kept > /workspace/note.txt; "
        f"for i in $(seq 50); do {ASK} 2>/dev/null && break; sleep 0.1; done",
        timeout=10,
    )
    value, holder_pid = started.split()
    sleep_pid = _run(backend, "cat /tmp/sleep.pid", timeout=5)
    assert _run(backend, f"kill -0 {sleep_pid} && echo alive", timeout=5) == "alive"

    hibernated = kube.wait_for(
        "the session hibernated, its pod gone",
        lambda: (
            (s := _status(kube, "sleeper", namespace)).get("phase") == phases.Phase.SUSPENDED
            and (s.get("hibernation") or {}).get("hibernated")
            and kube.get("pod", pod, namespace) is None
            and s
        ),
        timeout=90,
    )
    record = hibernated["hibernation"]
    assert record["reason"] == phases.REASON_CHECKPOINTED, record
    assert record["sizeBytes"] > 0 and record["takenAt"], record
    image = NodeDirs(cluster.paths.root / "node").checkpoints / namespace / record["checkpoint"]
    assert image.is_dir() and any(image.iterdir()), f"no image at {image}"
    assert kube.is_true({"status": hibernated}, phases.COND_HIBERNATED), hibernated["conditions"]

    # The client's next call wakes it, exactly as it resumes a suspended session.
    woke = _run(backend, f"{ASK}; kill -0 $(cat /tmp/sleep.pid) && echo alive; cat /tmp/marker /workspace/note.txt")
    assert woke.splitlines() == [f"{value} {holder_pid}", "alive", "rootfs-kept", "workspace-kept"], woke
    restored = kube.wait_for(
        "status.hibernation Restored",
        lambda: (
            (s := _status(kube, "sleeper", namespace)).get("hibernation", {}).get("reason") == phases.REASON_RESTORED
            and s
        ),
        timeout=60,
    )
    assert restored["hibernation"]["hibernated"] is False, restored["hibernation"]
    assert {"Hibernated", "Woke"} <= _events(kube, "sleeper", namespace)
    kube.wait_for("the image deleted on the node", lambda: not image.exists(), timeout=30)
    sandbox = kube.get("sandbox", restored["sandboxName"], namespace) or {}
    notes = ((sandbox["spec"]["podTemplate"].get("metadata") or {}).get("annotations")) or {}
    assert RESTORE_ANNOTATION not in notes, "a restart of the restored pod must start fresh"
    claim = kube.get("sandboxclaim", restored["claimName"], namespace) or {}
    extra = ((claim["spec"].get("additionalPodMetadata") or {}).get("annotations")) or {}
    assert RESTORE_ANNOTATION not in extra, "the claim controller would put it back on the Sandbox"
    backend.delete_session()


def test_a_runc_session_with_idle_action_hibernate_suspends(
    kube: Kube, namespace: str, hibernating_operator: OperatorProcess
) -> None:
    _pool(kube, namespace, "rc", None)
    backend = AgentSessionSandbox(
        "plain",
        namespace,
        warm_pool="rc",
        ttl="20m",
        idle_timeout="4s",
        idle_action="Hibernate",
        volume_claim_templates=WORKSPACE,
    )
    pod = backend.wait_ready().pod_name or ""
    suspended = kube.wait_for(
        "suspended as Suspend",
        lambda: (
            (s := _status(kube, "plain", namespace)).get("phase") == phases.Phase.SUSPENDED
            and s.get("hibernation")
            and kube.get("pod", pod, namespace) is None
            and s
        ),
        timeout=90,
    )
    assert suspended["hibernation"]["hibernated"] is False
    assert suspended["hibernation"]["reason"] == phases.REASON_NOT_GVISOR, suspended["hibernation"]
    condition = kube.condition({"status": suspended}, phases.COND_HIBERNATED) or {}
    assert (condition.get("status"), condition.get("reason")) == ("False", phases.REASON_NOT_GVISOR), condition
    assert "HibernateFallback" in _events(kube, "plain", namespace)
    backend.delete_session()


def test_a_namespace_over_its_hibernated_size_suspends_and_keeps_no_image(
    kube: Kube, cluster: Cluster, namespace: str, hibernating_operator: OperatorProcess
) -> None:
    """Issue 49 item 3: a policy's limits.maxHibernatedSize bounds the checkpoints a namespace's hibernated
    sessions keep together. Under 1 KiB no gVisor checkpoint fits: the image is taken, judged, deleted from
    the node, and the session suspends as Suspend saying which policy and how much."""
    _pool(kube, namespace, "gv-budget", manifests.GVISOR)
    kube.apply(
        {
            "apiVersion": "agentsession.dev/v1alpha1",
            "kind": "AgentSessionPolicy",
            "metadata": {"name": "tiny-budget"},
            "spec": {"selector": {"matchLabels": {"budget": "tiny"}}, "limits": {"maxHibernatedSize": "1Ki"}},
        },
        namespace=namespace,
    )
    backend = AgentSessionSandbox(
        "budgeted",
        namespace,
        warm_pool="gv-budget",
        ttl="20m",
        idle_timeout="4s",
        idle_action="Hibernate",
        session_labels={"budget": "tiny"},
    )
    pod = backend.wait_ready().pod_name or ""
    suspended = kube.wait_for(
        "suspended as Suspend over the budget",
        lambda: (
            (s := _status(kube, "budgeted", namespace)).get("phase") == phases.Phase.SUSPENDED
            and s.get("hibernation")
            and kube.get("pod", pod, namespace) is None
            and s
        ),
        timeout=120,
    )
    record = suspended["hibernation"]
    assert record["hibernated"] is False and record["reason"] == phases.REASON_HIBERNATED_SIZE_EXCEEDED, record
    assert "tiny-budget" in record["message"] and "maxHibernatedSize" in record["message"], record
    images = NodeDirs(cluster.paths.root / "node").checkpoints / namespace
    assert not any(p.name.startswith("budgeted-") for p in images.iterdir()) if images.is_dir() else True
    backend.delete_session()


# A process holding 200 MiB of touched memory, in the background; the command returns once it holds it.
HOG = (
    "nohup python3 -c \"import time; b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096]); "
    "open('/tmp/held', 'w').write('1'); time.sleep(100000)\" >/dev/null 2>&1 & "
    "for i in $(seq 100); do [ -f /tmp/held ] && echo held && break; sleep 0.1; done"
)


def test_a_sandbox_over_its_bound_suspends_and_nothing_is_written(
    kube: Kube, cluster: Cluster, namespace: str, hibernating_operator: OperatorProcess
) -> None:
    """Issue 49 item 3: a sandbox holding more memory (200 MiB) than its bound (a policy's maxCheckpointSize,
    64 MiB) was checkpointed in full onto the node's disk before the operator judged the image's size. Now the
    operator sends the bound and the node agent measures the sandbox first: nothing is written, the session
    suspends as Suspend, CheckpointTooLarge, saying the measured memory and the bound."""
    _pool(kube, namespace, "gv-hog", manifests.GVISOR)
    kube.apply(
        {
            "apiVersion": "agentsession.dev/v1alpha1",
            "kind": "AgentSessionPolicy",
            "metadata": {"name": "small-image"},
            "spec": {"selector": {"matchLabels": {"mem": "big"}}, "limits": {"maxCheckpointSize": "64Mi"}},
        },
        namespace=namespace,
    )
    backend = AgentSessionSandbox(
        "hog",
        namespace,
        warm_pool="gv-hog",
        ttl="20m",
        idle_timeout="4s",
        idle_action="Hibernate",
        session_labels={"mem": "big"},
    )
    pod = backend.wait_ready().pod_name or ""
    assert _run(backend, HOG, timeout=15) == "held"
    suspended = kube.wait_for(
        "suspended as Suspend over the bound",
        lambda: (
            (s := _status(kube, "hog", namespace)).get("phase") == phases.Phase.SUSPENDED
            and s.get("hibernation")
            and kube.get("pod", pod, namespace) is None
            and s
        ),
        timeout=120,
    )
    record = suspended["hibernation"]
    assert record["hibernated"] is False and record["reason"] == phases.REASON_CHECKPOINT_TOO_LARGE, record
    assert "nothing was written" in record["message"] and str(64 << 20) in record["message"], record
    images = NodeDirs(cluster.paths.root / "node").checkpoints / namespace
    assert not any(p.name.lstrip(".").startswith("hog-") for p in images.iterdir()) if images.is_dir() else True
    backend.delete_session()


def _hibernated(kube: Kube, cluster: Cluster, namespace: str, name: str, pod: str) -> Path:
    """Wait for the session's hibernate (its pod gone); the image's directory on the node."""
    status = kube.wait_for(
        f"{name} hibernated, its pod gone",
        lambda: (
            (s := _status(kube, name, namespace)).get("phase") == phases.Phase.SUSPENDED
            and (s.get("hibernation") or {}).get("hibernated")
            and kube.get("pod", pod, namespace) is None
            and s
        ),
        timeout=90,
    )
    image = NodeDirs(cluster.paths.root / "node").checkpoints / namespace / status["hibernation"]["checkpoint"]
    assert image.is_dir() and any(image.iterdir()), f"no image at {image}"
    return image


def _asleep_with_a_marker(kube: Kube, cluster: Cluster, namespace: str, name: str) -> tuple[AgentSessionSandbox, Path]:
    """A gVisor session that wrote a workspace file and an in-memory marker, then hibernated: its image."""
    _pool(kube, namespace, "gv", manifests.GVISOR)
    backend = AgentSessionSandbox(
        name,
        namespace,
        warm_pool="gv",
        ttl="20m",
        idle_timeout=IDLE,
        idle_action="Hibernate",
        volume_claim_templates=WORKSPACE,
    )
    pod = backend.wait_ready().pod_name or ""
    _run(backend, "echo workspace-kept > /workspace/note.txt; echo in-memory-only > /tmp/marker", timeout=5)
    return backend, _hibernated(kube, cluster, namespace, name, pod)


def _woke_fresh(kube: Kube, backend: AgentSessionSandbox, namespace: str, reason: str) -> dict[str, Any]:
    """Woken by a command: the workspace is there, the memory is not; status.hibernation and condition
    Hibernated say `reason`, a Warning Event of that reason. The condition."""
    woke = _run(backend, "cat /workspace/note.txt; cat /tmp/marker 2>/dev/null || echo rootfs-fresh")
    assert woke.splitlines() == ["workspace-kept", "rootfs-fresh"], woke

    def recorded() -> dict[str, Any] | None:
        status = _status(kube, backend.id, namespace)
        condition = kube.condition({"status": status}, phases.COND_HIBERNATED) or {}
        reasons = ((status.get("hibernation") or {}).get("reason"), condition.get("reason"))
        return condition if reasons == (reason,) * 2 else None

    condition: dict[str, Any] = kube.wait_for(f"status.hibernation and condition Hibernated {reason}", recorded, 60)
    assert condition["status"] == "False", condition
    assert reason in _events(kube, backend.id, namespace)
    return condition


@pytest.mark.faults
@pytest.mark.realfaults
def test_a_corrupt_image_wakes_fresh_with_a_clear_condition_and_the_workspace(
    cluster: Cluster, kube: Kube, namespace: str, hibernating_operator: OperatorProcess
) -> None:
    """A garbled image through the whole flow: the wake starts the pod fresh (no memory, the workspace kept),
    status.hibernation and condition Hibernated say RestoreFailed and why, a Warning Event RestoreFailed."""
    backend, image = _asleep_with_a_marker(kube, cluster, namespace, "garbled")
    pages = image / "pages.img"
    with pages.open("r+b") as f:
        f.seek(pages.stat().st_size // 2)
        data = f.read(4096)
        f.seek(pages.stat().st_size // 2)
        f.write(bytes(b ^ 0xFF for b in data))

    condition = _woke_fresh(kube, backend, namespace, phases.REASON_RESTORE_FAILED)
    assert "pages.img" in condition.get("message", ""), condition
    kube.wait_for("the image deleted on the node", lambda: not image.exists(), timeout=30)
    backend.delete_session()


# In make test-full (CI's real-node stage is near its share of the 40 minutes): a hibernate and a wake.
@pytest.mark.slow
def test_a_pod_spec_changed_while_hibernated_wakes_fresh_and_drops_the_image(
    cluster: Cluster, kube: Kube, namespace: str, hibernating_operator: OperatorProcess
) -> None:
    """Issue 49 item 7 under gVisor: while the session sleeps, an admin changes its Sandbox's pod spec. runsc
    restores with spec validation at "warning", so the old processes came back under the new spec. Now the
    wake starts fresh (the workspace kept, the memory not), says PodSpecChanged, and the image is deleted."""
    backend, image = _asleep_with_a_marker(kube, cluster, namespace, "respec")
    sandbox = _status(kube, "respec", namespace)["sandboxName"]
    change = {"spec": {"podTemplate": {"spec": {"terminationGracePeriodSeconds": 7}}}}
    kube.run("patch", "sandbox", sandbox, "-n", namespace, "--type=merge", "-p", json.dumps(change))

    condition = _woke_fresh(kube, backend, namespace, phases.REASON_POD_SPEC_CHANGED)
    assert "pod spec changed" in condition.get("message", ""), condition
    kube.wait_for("the image deleted on the node", lambda: not image.exists(), timeout=30)
    backend.delete_session()


@pytest.mark.faults
@pytest.mark.realfaults
def test_a_session_deleted_while_hibernated_takes_its_image_with_it(
    cluster: Cluster, kube: Kube, namespace: str, hibernating_operator: OperatorProcess
) -> None:
    """The image holds the sandbox's memory (secrets included): deleting the session deletes it on the node."""
    _pool(kube, namespace, "gv", manifests.GVISOR)
    backend = AgentSessionSandbox(
        "gone",
        namespace,
        warm_pool="gv",
        ttl="20m",
        idle_timeout=IDLE,
        idle_action="Hibernate",
        volume_claim_templates=WORKSPACE,
    )
    pod = backend.wait_ready().pod_name or ""
    image = _hibernated(kube, cluster, namespace, "gone", pod)
    kube.run("delete", "agentsession", "gone", "-n", namespace, "--wait=false")
    kube.wait_for("the image deleted with its session", lambda: not image.exists(), timeout=60)


@pytest.mark.faults
@pytest.mark.realfaults
def test_an_image_left_while_the_operator_was_down_is_swept_when_it_starts(
    cluster: Cluster, kube: Kube, namespace: str, hibernating_operator: OperatorProcess
) -> None:
    """A session deleted while no operator runs: nothing sees it go, so its image (the sandbox's memory)
    stayed on the node. The next operator's take-over lists every node's images and deletes it."""
    _pool(kube, namespace, "gv", manifests.GVISOR)
    backend = AgentSessionSandbox(
        "unseen", namespace, warm_pool="gv", ttl="20m", idle_timeout=IDLE, idle_action="Hibernate"
    )
    pod = backend.wait_ready().pod_name or ""
    image = _hibernated(kube, cluster, namespace, "unseen", pod)
    hibernating_operator.stop()
    try:
        kube.run("delete", "agentsession", "unseen", "-n", namespace, "--timeout=60s")
        assert image.is_dir(), "nothing runs that could have deleted it"
    finally:
        hibernating_operator.start()
    kube.wait_for("the image swept by the new operator", lambda: not image.exists(), timeout=90)


def _agent_checkpoints(cluster: Cluster) -> list[int]:
    """Host pids of `runsc ... checkpoint` run by the node agent (its runsc root is the pod's /host/runsc-root)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"checkpoint" in argv and b"--root=/host/runsc-root" in argv:
            found.append(int(proc.name))
    return found


def _agent_pids(kube: Kube) -> list[int]:
    """Host pids of the node agent's python (its container's processes, found by the agent's argv)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"agentsession_nodeagent" in argv and b"--checkpoint-root=/host/checkpoints" in argv:
            found.append(int(proc.name))
    return found


@pytest.mark.faults
@pytest.mark.realfaults
@pytest.mark.slow  # 30 s of make test's 40 minutes: make test-full (make test keeps the corrupt image's wake)
def test_the_node_agent_killed_mid_checkpoint_leaves_a_suspended_session(
    cluster: Cluster, kube: Kube, namespace: str, hibernating_operator: OperatorProcess
) -> None:
    """SIGKILL of the agent (and its runsc) while it checkpoints a sandbox holding 300 MB: the operator's
    request fails, the session suspends as Suspend (CheckpointFailed), no image is left to restore from,
    and the next use gets a fresh pod with the workspace intact."""
    _pool(kube, namespace, "gv", manifests.GVISOR)
    backend = AgentSessionSandbox(
        "killed",
        namespace,
        warm_pool="gv",
        ttl="20m",
        idle_timeout=IDLE,
        idle_action="Hibernate",
        volume_claim_templates=WORKSPACE,
    )
    pod = backend.wait_ready().pod_name or ""
    _run(
        backend,
        "echo workspace-kept > /workspace/note.txt; "
        "nohup python3 -c 'import os, time; data = os.urandom(300 << 20); time.sleep(10**6)' >/dev/null 2>&1 & "
        "sleep 3",
        timeout=10,
    )
    pids = kube.wait_for("the agent's runsc checkpoint running", lambda: _agent_checkpoints(cluster), 90, 0.02)
    for pid in [*_agent_pids(kube), *pids]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    suspended = kube.wait_for(
        "suspended as Suspend",
        lambda: (
            (s := _status(kube, "killed", namespace)).get("phase") == phases.Phase.SUSPENDED
            and s.get("hibernation")
            and kube.get("pod", pod, namespace) is None
            and s
        ),
        timeout=120,
    )
    record = suspended["hibernation"]
    assert record["hibernated"] is False and record["reason"] == phases.REASON_CHECKPOINT_FAILED, record
    uid = (kube.get("agentsession", "killed", namespace) or {})["metadata"]["uid"]
    images = NodeDirs(cluster.paths.root / "node").checkpoints / namespace
    own = (
        [p for p in images.iterdir() if p.name.startswith(checkpoint_prefix("killed", uid))] if images.is_dir() else []
    )
    assert not own, f"an image a pod could restore from: {own}"
    assert _run(backend, "cat /workspace/note.txt") == "workspace-kept"
    kube.run("rollout", "status", "-n", nodeagent.NAMESPACE, f"daemonset/{nodeagent.NAME}", "--timeout=120s")
    backend.delete_session()


def _agent_ca(kube: Kube) -> bytes:
    """The node agents' CA, as the operator made it (its Secret)."""
    namespace, name = nodeagent.CA_SECRET.split("/")
    secret = kube.get("secret", name, namespace) or {}
    return base64.b64decode((secret.get("data") or {})["ca.crt"])


def _ask_agent(ip: str, name: str, ca: bytes, token: str, path: str = "/v1/list") -> int:
    """POST to the agent as the operator does: TLS trusting the agents' CA alone, its certificate checked
    for ``name``; the HTTP status it answers."""
    context = ssl.create_default_context(cadata=ca.decode())
    with (
        socket.create_connection((ip, 8490), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname=name) as tls,
    ):
        tls.sendall(
            f"POST {path} HTTP/1.0\r\nHost: {name}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}".encode()
        )
        status_line = tls.makefile("rb").readline().decode()
    return int(status_line.split()[1])


def _operator_token(kube: Kube, audience: str) -> str:
    return str(
        kube.run(
            "create", "token", nodeagent.OPERATOR_ACCOUNT, "-n", nodeagent.OPERATOR_NAMESPACE, f"--audience={audience}"
        ).stdout.strip()
    )


def test_a_token_for_another_nodes_agent_is_refused_by_this_one(
    cluster: Cluster, kube: Kube, hibernating_operator: OperatorProcess
) -> None:
    """Issue 49 item 5: the operator mints each node's agent its own token (audience
    agentsession-nodeagent:<node>); what one node's agent receives opens no other. Asked as the operator asks
    (its ServiceAccount's tokens, over the agent's TLS, from the address the agent's NetworkPolicy admits): a
    token minted for another node's agent, or for the audience every agent shared before, is refused; this
    node's is served."""
    from agentsession_api.node_agent import audience_for as node_agent_audience
    from agentsession_api.node_agent import server_name

    (agent,) = kube.list("pod", nodeagent.NAMESPACE, f"app.kubernetes.io/name={nodeagent.NAME}")
    node, ip = agent["spec"]["nodeName"], agent["status"]["podIP"]
    ca = _agent_ca(kube)

    def listing(audience: str) -> int:
        return _ask_agent(ip, server_name(node), ca, _operator_token(kube, audience))

    assert listing(node_agent_audience(f"{node}-other")) == 403
    assert listing(node_agent_audience("")) == 403  # the one audience every agent accepted before
    assert listing(node_agent_audience(node)) == 200


def test_the_agent_proves_its_node_before_the_operator_sends_a_token(
    cluster: Cluster, kube: Kube, hibernating_operator: OperatorProcess
) -> None:
    """Issue 49 item 5, TLS: the agent serves only TLS, with the certificate the operator signed for its node
    (its CertificateSigningRequest, made by its pod's token, approved by the operator); a client checking for
    another node's name fails the handshake, so the operator's token for that node is never written."""
    from agentsession_api.node_agent import SIGNER, server_name
    from agentsession_api.node_agent import audience_for as node_agent_audience

    (agent,) = kube.list("pod", nodeagent.NAMESPACE, f"app.kubernetes.io/name={nodeagent.NAME}")
    node, ip, pod = agent["spec"]["nodeName"], agent["status"]["podIP"], agent["metadata"]["name"]
    ca = _agent_ca(kube)
    token = _operator_token(kube, node_agent_audience(node))
    assert _ask_agent(ip, server_name(node), ca, token) == 200
    with pytest.raises(ssl.SSLCertVerificationError):
        _ask_agent(ip, server_name(f"{node}-other"), ca, token)
    with pytest.raises(ssl.SSLCertVerificationError):  # any other CA's trust: the agent's certificate is not it
        _ask_agent(ip, server_name(node), _other_ca(), token)
    with socket.create_connection((ip, 8490), timeout=30) as raw:  # plain HTTP gets no HTTP answer
        raw.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        try:
            answered = raw.recv(64)
        except ConnectionResetError:  # the handshake failed on the agent's side
            answered = b""
        assert not answered.startswith(b"HTTP/")
    signed = [
        r
        for r in json.loads(kube.run("get", "csr", "-o", "json").stdout)["items"]
        if r["spec"]["signerName"] == SIGNER and (r.get("status") or {}).get("certificate")
    ]
    extras = [(r["spec"].get("extra") or {}).get("authentication.kubernetes.io/pod-name") for r in signed]
    assert [pod] in extras, "the serving agent's own request, made with its pod's token"


def _other_ca() -> bytes:
    from agentsession_operator.infra.agent_ca import new_ca

    return new_ca().cert


def test_a_certificate_request_no_agent_pod_made_is_denied(
    cluster: Cluster, kube: Kube, hibernating_operator: OperatorProcess
) -> None:
    """A request for the agents' signer made by anyone but an agent pod's own token (here the cluster's admin,
    as a tenant with the right to create CSRs would): denied, saying why; no certificate."""
    from agentsession_api.node_agent import SIGNER
    from agentsession_nodeagent.tls import key_and_request

    _, request = key_and_request("some-node")
    name = f"not-an-agent-{os.getpid()}"
    csr = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64.b64encode(request).decode(), "signerName": SIGNER, "usages": ["server auth"]},
    }
    kube.run("create", "-f", "-", input=json.dumps(csr))
    try:
        kube.run("wait", f"csr/{name}", "--for=condition=Denied", "--timeout=60s")
        status = (kube.get("csr", name) or {}).get("status") or {}
        assert [c["reason"] for c in status["conditions"]] == ["NotAPod"]
        assert not status.get("certificate")
    finally:
        kube.run("delete", "csr", name, "--ignore-not-found")
