"""A session's own sandbox pod keeps its limits (issue 31): the hardened sample template
(config/samples/10-sandboxtemplate-python.yaml) as shipped, under runc (its `runtimeClassName` line
deleted, as its comment says) and under gVisor (as shipped), reached through the client as a user's
agent reaches it.

- the root filesystem is read-only, the workspace is writable;
- a command that allocates past the template's memory limit (2 GiB) is killed, and the caller is told;
- a fork bomb meets the pids limit and the session answers afterwards.

The hand-written pods of test_real_node.py check the same limits on bare pods; here it is the pod that
agent-sandbox made for an AgentSession.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from langchain_k8s_client import AgentSessionSandbox, SandboxError
from langchain_k8s_client.errors import TransportError
from testkit import manifests
from tests.e2e.conftest import RUNTIMES as SHARED_RUNTIMES
from tests.e2e.conftest import Kube, OperatorProcess
from tests.e2e.test_hostile_client import fork_bomb_is_contained
from tests.e2e.test_install import POOL_SAMPLE, TEMPLATE_SAMPLE, by_kind, load, restricted

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]
POOL = "python-pool"
HOG = "python3 -c 'x = bytearray(3 << 30)'"
"""3 GiB, touched (bytearray zero-fills it): past the template's 2 GiB limit."""


def hardened_template(runtime: str | None) -> dict[str, Any]:
    template = by_kind(load(TEMPLATE_SAMPLE), "SandboxTemplate")
    pod_spec = template["spec"]["podTemplate"]["spec"]
    assert pod_spec["runtimeClassName"] == manifests.GVISOR
    assert pod_spec["containers"][0]["resources"]["limits"]["memory"] == "2Gi"
    if runtime is None:
        del pod_spec["runtimeClassName"]
    return template


# gVisor's limits end the whole sandbox and wait out a read timeout and a container restart (minutes):
# make test-full runs them; make test the runc ones.
RUNTIMES = [
    SHARED_RUNTIMES[0],  # runc
    pytest.param(manifests.GVISOR, id="gvisor", marks=[pytest.mark.realnode, pytest.mark.slow]),
]


@pytest.fixture(scope="module", params=RUNTIMES)
def limited(request: pytest.FixtureRequest, kube: Kube, operator: OperatorProcess) -> Iterator[AgentSessionSandbox]:
    """One session per runtime on the sample template and pool, in a namespace enforcing Pod Security
    restricted (as the sample asks)."""
    runtime: str | None = request.param
    namespace = f"limits-{uuid.uuid4().hex[:6]}"
    kube.run("create", "namespace", namespace)
    restricted(kube, namespace)
    pool = by_kind(load(POOL_SAMPLE), "SandboxWarmPool")
    pool["spec"]["replicas"] = 1
    kube.apply(hardened_template(runtime), pool, namespace=namespace)
    try:
        with AgentSessionSandbox("limited", namespace, warm_pool=POOL, ttl="1h", ready_timeout=240) as backend:
            view = backend.wait_ready()
            pod = kube.get("pod", view.pod_name or "", namespace)
            assert pod is not None and pod["spec"].get("runtimeClassName") == runtime, pod
            yield backend
    finally:
        kube.run("delete", "namespace", namespace, "--wait=false", check=False)


def runtime_of(sandbox: AgentSessionSandbox, kube: Kube) -> str | None:
    view = sandbox.wait_ready()
    pod = kube.get("pod", view.pod_name or "", view.namespace) or {}
    return (pod.get("spec") or {}).get("runtimeClassName")


def test_root_is_read_only_and_the_workspace_writable(limited: AgentSessionSandbox) -> None:
    assert limited.execute("id -u").output.strip() == "1000"
    # /app is the runtime user's own: only the read-only root keeps it out (gVisor checks permissions
    # before the mount, so root's / says "Permission denied" there and "Read-only file system" under runc).
    app = limited.execute("touch /app/x")
    assert app.exit_code != 0 and "Read-only file system" in app.output, app
    root = limited.execute("echo x > /x")
    assert root.exit_code != 0 and ("Read-only file system" in root.output or "Permission denied" in root.output)
    assert limited.execute("test -e /x || test -e /app/x || echo absent").output.strip() == "absent"
    written = limited.execute("echo kept > /workspace/w.txt && cat /workspace/w.txt")
    assert written.exit_code == 0 and written.output.strip() == "kept", written
    assert limited.write("/workspace/by-client.txt", "written\n").error is None
    assert limited.execute("echo tmp > /tmp/t && cat /tmp/t").output.strip() == "tmp"


def _ready_again(kube: Kube, sandbox: AgentSessionSandbox, timeout: float) -> dict[str, Any]:
    view = sandbox.session

    def ready() -> dict[str, Any] | None:
        body = kube.get("agentsession", view.name, view.namespace) or {}
        return body if (body.get("status") or {}).get("phase") == "Ready" else None

    return dict(kube.wait_for("the session Ready again", ready, timeout=timeout, interval=1.0))


def test_memory_hog_is_killed_and_the_caller_told(limited: AgentSessionSandbox, kube: Kube) -> None:
    runtime = runtime_of(limited, kube)
    if runtime is None:
        # runc: the kernel's OOM killer kills the hog alone; the call answers, saying why.
        result = limited.execute(HOG, timeout=120)
        assert result.exit_code == 137, result
        assert "out of memory" in result.output and "memory limit" in result.output, result
        print("runc:", result.exit_code, result.output.strip())
        assert limited.execute("echo alive").output.strip() == "alive"
        body = kube.get("agentsession", limited.session.name, limited.session.namespace) or {}
        assert body["status"]["phase"] == "Ready", body["status"]
        return
    # gVisor: the host's memory cgroup holds the whole sandbox, so the OOM killer kills the Sentry and
    # every process of the sandbox with it (docs/gvisor.md). The call cannot answer (gVisor's netstack died
    # with the connection): it raises a typed error at its read timeout. By then the kubelet has restarted
    # the container (its last state says OOMKilled) and the session is Ready again (SandboxUnavailable for
    # the few seconds between, seen 2026-12-04: OOMKilled at 01:16:51, Ready again at 01:17:00).
    started = time.monotonic()
    with pytest.raises(TransportError) as raised:
        limited.execute(HOG, timeout=30)
    assert raised.value.maybe_delivered, repr(raised.value)
    print(f"gvisor: {type(raised.value).__name__} after {time.monotonic() - started:.1f} s: {raised.value}")
    view = limited.session

    def oom_killed() -> dict[str, Any] | None:
        pod = kube.get("pod", view.pod_name or "", view.namespace) or {}
        (status,) = (pod.get("status") or {}).get("containerStatuses") or [{}]
        last = (status.get("lastState") or {}).get("terminated") or {}
        return last if last.get("reason") == "OOMKilled" else None

    print("gvisor: the container's last state", kube.wait_for("OOMKilled in the pod", oom_killed, timeout=120))
    _ready_again(kube, limited, timeout=180)
    assert limited.execute("echo alive").output.strip() == "alive"
    assert limited.execute("cat /workspace/w.txt").output.strip() == "kept"  # an emptyDir outlives a restart


def test_zz_fork_bomb_is_contained_and_the_session_answers(limited: AgentSessionSandbox, kube: Kube) -> None:
    """Last in the module (a fork bomb leaves the pod's pids to be reaped)."""
    if runtime_of(limited, kube) is None:
        fork_bomb_is_contained(limited)  # runc: killed at its timeout, the runtime never stops answering
        return
    # gVisor: the pod's pids limit counts the Sentry's threads and systrap's stub processes, so the bomb
    # uses it up and the whole sandbox dies (docs/gvisor.md): the host is unharmed and the session answers
    # again once the kubelet restarted its container.
    try:
        result = limited.execute("f() { f | f & }; f; sleep 100", timeout=5)
        print("gvisor: the fork bomb's call answered", result.exit_code)
    except TransportError as exc:
        print(f"gvisor: the fork bomb's call raised {type(exc).__name__}: {exc}")
    deadline = time.monotonic() + 240
    while True:
        try:
            if limited.execute("echo alive", timeout=10).output.strip() == "alive":
                break
        except SandboxError:  # TransportError while it dies, SessionNotReady while it restarts
            pass
        if time.monotonic() > deadline:
            raise AssertionError("the gVisor session did not answer within 240 s of the fork bomb")
        time.sleep(2)
    assert _ready_again(kube, limited, timeout=60)["status"]["phase"] == "Ready"
