"""Issue 51 item 1: the client knows it reached its own pod, on the real node.

Attack: a pod name is unique only within a namespace, and a pod IP only while the pod lives. Tenant B runs a
pod named like tenant A's sandbox pod, with the same runtime, at the IP that A's session's status names (a
stale status: A's pod moved and the IP went to B's pod). Name and address both match, so the probe's answers
were all the client had, and B's pod received A's commands and files. B's pod even holds an identity token of
its own, minted by the cluster for it: everything but the namespace is right.

The client now refuses any pod that does not show an identity token signed by the cluster's own
ServiceAccount keys for the audience agentsession.dev/pod-identity and naming the session's namespace and
pod, before it sends the session anything (the identity probe carries nothing of the session). The session's
own pod, on runc and under gVisor, proves itself with the token its template mounts.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agentsession_api import names
from langchain_k8s_client import AgentSessionSandbox, PodSandbox, WrongPod
from langchain_k8s_client.endpoints import EndpointResolver
from langchain_k8s_client.sessions import SessionView
from testkit import manifests
from testkit.manifests import PYTHON_RUNTIME_IMAGE
from tests.e2e.conftest import RUNTIMES, Kube

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

RECEIVED = "/tmp/received-by-namesake"


def _namesake(name: str) -> dict[str, Any]:
    """Tenant B's pod: A's pod name, the same runtime image, and an identity token of B's own namespace."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "namesake"}},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "runtime",
                    "image": PYTHON_RUNTIME_IMAGE,
                    "ports": [{"containerPort": 8888}],
                    "readinessProbe": {"httpGet": {"path": "/", "port": 8888}, "periodSeconds": 2},
                    "volumeMounts": [
                        {"name": names.POD_IDENTITY_VOLUME, "mountPath": names.POD_IDENTITY_DIR, "readOnly": True}
                    ],
                }
            ],
            "volumes": [
                {
                    "name": names.POD_IDENTITY_VOLUME,
                    "projected": {
                        "sources": [
                            {
                                "serviceAccountToken": {
                                    "audience": names.POD_IDENTITY_AUDIENCE,
                                    "expirationSeconds": 3600,
                                    "path": "token",
                                }
                            }
                        ]
                    },
                }
            ],
        },
    }


def _ready_ip(kube: Kube, name: str, namespace: str) -> str:
    def check() -> str | None:
        pod = kube.get("pod", name, namespace)
        return str(pod["status"]["podIP"]) if pod and kube.is_true(pod, "Ready") else None

    return str(kube.wait_for(f"pod {namespace}/{name} Ready", check, timeout=180, interval=0.5))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_namesake_pod_at_the_ip_the_status_names_never_receives_a_command_or_a_file(
    kube: Kube, pool_namespace: str, namespace: str, runtime: str | None
) -> None:
    pool = f"identity-{runtime or 'runc'}"
    template = manifests.template(pool, PYTHON_RUNTIME_IMAGE, runtime_class=runtime)  # with the identity volume
    kube.apply(template, manifests.warm_pool(pool, pool, replicas=1), namespace=pool_namespace)
    with AgentSessionSandbox(f"victim-{pool}", pool_namespace, warm_pool=pool, ttl="30m") as victim:
        assert victim.execute("echo own-pod").output.strip() == "own-pod"  # the session's pod proves itself
        body = kube.get("agentsession", f"victim-{pool}", pool_namespace)
        pod_name = body["status"]["podName"]

        kube.apply(_namesake(pod_name), namespace=namespace)  # tenant B's namespace
        stale = copy.deepcopy(body)
        stale["status"]["podIPs"] = [_ready_ip(kube, pod_name, namespace)]
        endpoint = EndpointResolver(None, pool_namespace).resolve(SessionView.of(stale))
        reached = PodSandbox(endpoint, sandbox_id=f"victim-{pool}")

        with pytest.raises(WrongPod) as refused:
            reached.execute(f"echo command > {RECEIVED}-command")
        assert pod_name in str(refused.value), refused.value
        with pytest.raises(WrongPod):
            reached.upload_files([(f"{RECEIVED}-file", b"tenant A's file")])

        listed = kube.run("exec", "-n", namespace, pod_name, "--", "sh", "-c", f"ls {RECEIVED}* 2>/dev/null; true")
        assert listed.stdout.strip() == "", f"the namesake received: {listed.stdout}"
        assert victim.execute("echo still-own").output.strip() == "still-own"
