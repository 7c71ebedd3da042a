"""Real sandbox runtimes on the local control plane: the pod runner acting as the kubelet."""

from __future__ import annotations

import os
import signal
from typing import Any

import httpx
import pytest
from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.models import SandboxInClusterConnectionConfig

from devcluster.cluster import Cluster
from testkit import manifests
from tests.e2e.conftest import Kube

pytestmark = pytest.mark.e2e


def _ready_claim(kube: Kube, name: str, namespace: str, timeout: float = 90) -> dict[str, Any]:
    return kube.wait_for(
        f"claim {name} Ready",
        lambda: (c := kube.get("sandboxclaim", name, namespace)) and kube.is_true(c, "Ready") and c,
        timeout=timeout,
    )


def _pod_ip(kube: Kube, name: str, namespace: str) -> str:
    pod = kube.get("pod", name, namespace)
    assert pod is not None
    return str(pod["status"]["podIP"])


def execute(ip: str, script: str, timeout: float = 30) -> dict[str, Any]:
    """POST a shell script to the upstream runtime (it splits commands with shlex, without a shell)."""
    import shlex

    response = httpx.post(
        f"http://{ip}:8888/execute", json={"command": f"sh -c {shlex.quote(script)}"}, timeout=timeout
    )
    response.raise_for_status()
    return dict(response.json())


def _runtime_pool(kube: Kube, namespace: str, **template_kwargs: Any) -> None:
    kube.apply(
        manifests.template("py", manifests.PYTHON_RUNTIME_IMAGE, **template_kwargs),
        manifests.warm_pool("py", "py", 0),
        namespace=namespace,
    )


def test_sdk_runs_commands_and_files_on_python_runtime(kube: Kube, namespace: str) -> None:
    _runtime_pool(kube, namespace)
    kube.apply(manifests.claim("sdk", "py"), namespace=namespace)
    _ready_claim(kube, "sdk", namespace)
    client = SandboxClient(connection_config=SandboxInClusterConnectionConfig())
    sandbox = client.get_sandbox("sdk", namespace=namespace)
    result = sandbox.commands.run("sh -c 'echo hi; exit 3'")
    assert result.stdout.strip() == "hi"
    assert result.exit_code == 3
    sandbox.files.write("hello.txt", "from the SDK")
    assert sandbox.files.read("hello.txt") == b"from the SDK"
    assert execute(_pod_ip(kube, "sdk", namespace), "hostname")["stdout"].strip() == "sdk"


def test_pvc_outlives_pod(kube: Kube, namespace: str) -> None:
    # The claim's volumeClaimTemplate becomes a pod volume; the template mounts it by name.
    _runtime_pool(
        kube, namespace, vct_policy="Allowed", volume_mounts=[{"name": "workspace", "mountPath": "/workspace"}]
    )
    vct = {
        "metadata": {"name": "workspace"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    kube.apply(manifests.claim("vol", "py", volumeClaimTemplates=[vct]), namespace=namespace)
    claim = _ready_claim(kube, "vol", namespace)
    pod_name = claim["status"]["sandbox"]["name"]
    pvc = kube.wait_for(
        "PVC bound",
        lambda: (
            (p := kube.get("pvc", f"workspace-{pod_name}", namespace)) and p["status"].get("phase") == "Bound" and p
        ),
    )
    assert pvc["spec"]["volumeName"]
    pod = kube.get("pod", pod_name, namespace)
    assert pod is not None
    mount = "/workspace"
    ip = _pod_ip(kube, pod_name, namespace)
    assert execute(ip, f"echo persisted > {mount}/f.txt")["exit_code"] == 0
    old_uid = pod["metadata"]["uid"]
    kube.run("delete", "pod", pod_name, "-n", namespace, "--timeout=60s")
    new = kube.wait_for(
        "replacement pod Ready",
        lambda: (
            (p := kube.get("pod", pod_name, namespace))
            and p["metadata"]["uid"] != old_uid
            and kube.is_true(p, "Ready")
            and p
        ),
        timeout=90,
    )
    out = execute(new["status"]["podIP"], f"cat {mount}/f.txt")
    assert out["stdout"].strip() == "persisted", out


@pytest.mark.kwoknode(reason="the pod runner's bubblewrap root (the real node: test_real_node)")
def test_pods_have_their_own_filesystems(kube: Kube, namespace: str) -> None:
    _runtime_pool(kube, namespace)
    kube.apply(manifests.claim("a", "py"), manifests.claim("b", "py"), namespace=namespace)
    ips = [_pod_ip(kube, _ready_claim(kube, n, namespace)["status"]["sandbox"]["name"], namespace) for n in "ab"]
    assert ips[0] != ips[1]
    for ip, word in zip(ips, ("alpha", "beta"), strict=True):
        assert execute(ip, f"echo {word} > /tmp/x")["exit_code"] == 0
    assert execute(ips[0], "cat /tmp/x")["stdout"].strip() == "alpha"
    assert execute(ips[1], "cat /tmp/x")["stdout"].strip() == "beta"
    denied = execute(ips[0], "touch /etc/x")
    assert denied["exit_code"] != 0 and "Read-only file system" in denied["stderr"], denied
    # The host's project tree and secrets are not in the pod at all.
    assert execute(ips[0], f"test -e {Cluster().paths.pki}")["exit_code"] != 0
    assert execute(ips[0], "command -v python && command -v python3")["exit_code"] == 0


@pytest.mark.kwoknode(reason="the pod runner maps runAsUser itself (the real node: test_real_node)")
def test_run_as_user_cannot_write_root_owned_directory(kube: Kube, namespace: str) -> None:
    _runtime_pool(
        kube,
        namespace,
        pod_security_context={"runAsUser": 1000, "runAsGroup": 1000},
        volume_mounts=[{"name": "data", "mountPath": "/data"}],
        volumes=[{"name": "data", "emptyDir": {}}],
    )
    kube.apply(manifests.claim("u", "py"), namespace=namespace)
    ip = _pod_ip(kube, _ready_claim(kube, "u", namespace)["status"]["sandbox"]["name"], namespace)
    assert execute(ip, "id -u")["stdout"].strip() == "1000"
    denied = execute(ip, "touch /data/x")
    assert denied["exit_code"] != 0 and "Permission denied" in denied["stderr"], denied
    assert execute(ip, "touch /tmp/x && touch /app/y")["exit_code"] == 0


@pytest.mark.kwoknode(reason="kills the pod runner's process by pid (the real node's kubelet: test_real_node)")
def test_readiness_follows_the_probe_and_the_process(kube: Kube, namespace: str, cluster: Cluster) -> None:
    kube.apply(
        manifests.template("never", manifests.PYTHON_RUNTIME_IMAGE, readiness_path="/no-such-path"),
        manifests.warm_pool("never", "never", 0),
        manifests.claim("never", "never"),
        namespace=namespace,
    )
    pod = kube.wait_for(
        "pod Running",
        lambda: (p := kube.get("pod", "never", namespace)) and p["status"].get("phase") == "Running" and p,
    )
    ip = pod["status"]["podIP"]
    kube.wait_for("runtime answering", lambda: _answers(ip))

    def unhealthy() -> int:
        events = kube.list("events", namespace)
        return len([e for e in events if e.get("reason") == "Unhealthy" and e["involvedObject"]["name"] == "never"])

    # Probes ran and failed with the runtime up (a kubelet's Unhealthy Events, two probe periods apart).
    seen = unhealthy()
    kube.wait_for("two more failed readiness probes", lambda: unhealthy() >= seen + 2, timeout=30)
    assert not kube.is_true(kube.get("pod", "never", namespace), "Ready")

    _runtime_pool(kube, namespace)
    kube.apply(manifests.claim("dies", "py"), namespace=namespace)
    _ready_claim(kube, "dies", namespace)
    pidfile = next(cluster.paths.pods.glob(f"{namespace}_dies_*/pid"))
    os.killpg(int(pidfile.read_text()), signal.SIGKILL)
    kube.wait_for(
        "pod NotReady after its runtime died",
        lambda: not kube.is_true(kube.get("pod", "dies", namespace), "Ready"),
        timeout=30,
    )


def _answers(ip: str) -> bool:
    try:
        return httpx.get(f"http://{ip}:8888/", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_deleting_the_claim_stops_the_runtime(kube: Kube, namespace: str) -> None:
    _runtime_pool(kube, namespace)
    kube.apply(manifests.claim("gone", "py"), namespace=namespace)
    ip = _pod_ip(kube, _ready_claim(kube, "gone", namespace)["status"]["sandbox"]["name"], namespace)
    assert _answers(ip)
    kube.run("delete", "sandboxclaim", "gone", "-n", namespace)
    kube.wait_for("pod gone", lambda: kube.get("pod", "gone", namespace) is None, timeout=60)
    assert not _answers(ip)
