"""The real node: containerd + runc, a kubelet, kube-proxy and enforced NetworkPolicies (NODE=real only).

Every image here comes from the cluster's own registry (built from Debian packages and PyPI), pulled by
containerd under its upstream name.
"""

from __future__ import annotations

import ipaddress
import json
import time
import urllib.request
from typing import Any

import pytest

from devcluster.realnode import network
from testkit import manifests
from tests.e2e.conftest import RUNTIMES, Kube

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

PY = manifests.PYTHON_RUNTIME_IMAGE
# Restricted-PSS-compatible settings that every pod below uses unless a test says otherwise.
RESTRICTED = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _pod(
    name: str,
    command: list[str],
    *,
    labels: dict[str, str] | None = None,
    security: dict[str, Any] | None = None,
    resources: dict[str, Any] | None = None,
    restart: str = "Always",
    runtime_class: str | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": PY,
        "command": command,
        "securityContext": security if security is not None else RESTRICTED,
    }
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {"containers": [container], "restartPolicy": restart, "automountServiceAccountToken": False}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": spec,
    }


def _http_server(
    name: str, port: int = 8080, labels: dict[str, str] | None = None, runtime_class: str | None = None
) -> dict[str, Any]:
    command = ["python3", "-m", "http.server", str(port), "--bind", "0.0.0.0", "--directory", "/"]
    return _pod(name, command, labels=labels, runtime_class=runtime_class)


def _running(kube: Kube, name: str, namespace: str, timeout: float = 120) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        pod = kube.get("pod", name, namespace)
        return pod if pod and kube.is_true(pod, "Ready") else None

    return dict(kube.wait_for(f"pod {namespace}/{name} Ready", check, timeout=timeout, interval=0.5))


def _fetch_from_pod(kube: Kube, namespace: str, pod: str, url: str, timeout: float = 3) -> str:
    """Fetch `url` from inside a pod (kubectl exec): 'ok <status>' or 'error <reason>'."""
    script = (
        "import urllib.request,sys\n"
        "try:\n"
        f"    r = urllib.request.urlopen({url!r}, timeout={timeout})\n"
        "    print('ok', r.status)\n"
        "except Exception as e:\n"
        "    print('error', type(e).__name__)\n"
    )
    proc = kube.run("exec", "-n", namespace, pod, "--", "python3", "-c", script, check=False)
    return (proc.stdout or proc.stderr).strip()


def test_node_is_ready_with_containerd(kube: Kube) -> None:
    out = kube.run("get", "nodes", "-o", "wide").stdout
    line = next(row for row in out.splitlines() if row.startswith("devcluster-real-1"))
    assert " Ready " in line, out
    assert "containerd://2.4.2" in line, out
    assert network.NODE_IP in line, out


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_pod_from_local_registry_runs_with_logs_and_exec(kube: Kube, namespace: str, runtime: str | None) -> None:
    command = ["sh", "-c", "echo hello from a real container; exec sleep 600"]
    kube.apply(_pod("hello", command, runtime_class=runtime), namespace=namespace)
    pod = _running(kube, "hello", namespace)
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(network.POD_CIDR), pod["status"]
    image_id = pod["status"]["containerStatuses"][0]["imageID"]
    assert image_id.startswith("registry.k8s.io/agent-sandbox/python-runtime-sandbox@sha256:"), image_id
    kube.wait_for(
        "the pod's log", lambda: "hello from a real container" in kube.run("logs", "-n", namespace, "hello").stdout
    )
    assert kube.run("exec", "-n", namespace, "hello", "--", "id", "-u").stdout.strip() == "1000"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_security_context_is_enforced(kube: Kube, namespace: str, runtime: str | None) -> None:
    security = dict(RESTRICTED, readOnlyRootFilesystem=True)
    kube.apply(_pod("locked", ["sleep", "600"], security=security, runtime_class=runtime), namespace=namespace)
    _running(kube, "locked", namespace)
    # /app is the image user's own: only the read-only root refuses it (gVisor checks permissions first, so
    # root's /etc would say "Permission denied" there).
    touch = kube.run("exec", "-n", namespace, "locked", "--", "touch", "/app/x", check=False)
    assert touch.returncode != 0 and "Read-only file system" in touch.stderr, touch
    # runAsNonRoot with an image whose user is root and no runAsUser: the kubelet refuses to start it.
    root = {k: v for k, v in RESTRICTED.items() if k != "runAsUser"}
    root_pod = _pod("rootless", ["sleep", "600"], security=dict(root, runAsUser=0), runtime_class=runtime)
    proc = kube.apply(root_pod, namespace=namespace, check=False)
    if proc.returncode == 0:
        kube.wait_for(
            "runAsNonRoot refusal",
            lambda: "non-root" in json.dumps((kube.get("pod", "rootless", namespace) or {}).get("status", {})),
            timeout=60,
        )


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_memory_limit_is_enforced(kube: Kube, namespace: str, runtime: str | None) -> None:
    hog = _pod(
        "hog",
        ["python3", "-c", "x = bytearray(256 * 1024 * 1024); import time; time.sleep(600)"],
        resources={"limits": {"memory": "64Mi", "cpu": "500m"}},
        restart="Never",
        runtime_class=runtime,
    )
    kube.apply(hog, namespace=namespace)

    def oom() -> str | None:
        pod = kube.get("pod", "hog", namespace) or {}
        for status in pod.get("status", {}).get("containerStatuses", []):
            terminated = status.get("state", {}).get("terminated")
            if terminated:
                return str(terminated.get("reason"))
        return None

    assert kube.wait_for("the memory hog to be killed", oom, timeout=120) == "OOMKilled"


def test_service_answers_from_host_and_pods(kube: Kube, namespace: str) -> None:
    kube.apply(_http_server("web", labels={"app": "web"}), namespace=namespace)
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
        namespace=namespace,
    )
    kube.apply(_pod("probe", ["sleep", "600"]), namespace=namespace)
    _running(kube, "web", namespace)
    _running(kube, "probe", namespace)
    ip = kube.get("service", "web", namespace)["spec"]["clusterIP"]  # type: ignore[index]
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(network.SERVICE_CIDR), ip

    def from_host() -> bool:
        try:
            with urllib.request.urlopen(f"http://{ip}/", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    kube.wait_for("the Service from the host", from_host, timeout=60)
    assert _fetch_from_pod(kube, namespace, "probe", f"http://{ip}/") == "ok 200"
    # The API server through the `kubernetes` Service, as an in-cluster client reaches it (401: no token).
    reply = _fetch_from_pod(kube, namespace, "probe", f"https://{network.KUBERNETES_SERVICE_IP}/version")
    assert reply.startswith(("ok", "error HTTPError", "error URLError")), reply
    assert "timeout" not in reply.lower(), reply


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_network_policy_is_enforced(kube: Kube, namespace: str, runtime: str | None) -> None:
    """Every pod of the test under one runtime: under gVisor, its netstack sends from the pod's own veth,
    so kube-router's iptables rules see the same packets as under runc."""
    other = f"{namespace}-b"
    kube.run("create", "namespace", other)
    try:
        kube.apply(_http_server("server", labels={"app": "server"}, runtime_class=runtime), namespace=namespace)
        client = _pod("client", ["sleep", "600"], labels={"role": "client"}, runtime_class=runtime)
        stranger = _pod("stranger", ["sleep", "600"], labels={"role": "other"}, runtime_class=runtime)
        kube.apply(client, stranger, namespace=namespace)
        # The tenant next door labels its pod like the allowed client: labels alone must not let it in.
        intruder = _pod("intruder", ["sleep", "600"], labels={"role": "client"}, runtime_class=runtime)
        kube.apply(intruder, namespace=other)
        for name, ns in (("server", namespace), ("client", namespace), ("stranger", namespace), ("intruder", other)):
            _running(kube, name, ns)
        server_ip = kube.get("pod", "server", namespace)["status"]["podIP"]  # type: ignore[index]
        url = f"http://{server_ip}:8080/"
        assert _fetch_from_pod(kube, other, "intruder", url) == "ok 200"  # no policy yet: open
        kube.apply(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": "server-from-clients"},
                "spec": {
                    "podSelector": {"matchLabels": {"app": "server"}},
                    "policyTypes": ["Ingress"],
                    "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}],
                },
            },
            namespace=namespace,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if _fetch_from_pod(kube, other, "intruder", url, timeout=1) != "ok 200":
                break
            time.sleep(0.5)
        assert _fetch_from_pod(kube, other, "intruder", url).startswith("error"), "another namespace got in"
        assert _fetch_from_pod(kube, namespace, "stranger", url).startswith("error"), "an unlabelled pod got in"
        assert _fetch_from_pod(kube, namespace, "client", url) == "ok 200"
    finally:
        kube.run("delete", "namespace", other, "--wait=false", check=False)
