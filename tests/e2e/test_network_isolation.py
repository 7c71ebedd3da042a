"""Issue 11 item 1 on the real node (kube-router enforces NetworkPolicy): who reaches a session's sandbox,
and where the sandbox may connect to.

Attack: tenant B labels a pod of its own namespace with the client label and sends commands to tenant A's
sandbox (the runtime has no authentication). Before: the sample template's policy admitted the label from
every namespace, and the operator created no policy at all. Now: each session gets its own NetworkPolicy,
owned by the session, that admits only client pods of the session's namespace (and the router), and whose
egress the AgentSessionPolicy decides (nothing by default).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentsession_api import names
from agentsession_operator.constants import SANDBOX_CLAIM_UID_LABEL
from testkit import manifests
from tests.e2e.conftest import RUNTIMES, Kube, OperatorProcess
from tests.e2e.test_real_node import _fetch_from_pod, _pod, _running

pytestmark = pytest.mark.e2e

CLIENT = {names.LABEL_SANDBOX_CLIENT: "true"}
RUNTIME_PORT = 8888


@pytest.fixture
def tenant_b(kube: Kube, namespace: str) -> Iterator[str]:
    other = f"{namespace}-b"
    kube.run("create", "namespace", other)
    yield other
    kube.run("delete", "namespace", other, "--wait=false", check=False)


def _ready_session(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        body = kube.get("agentsession", name, namespace)
        return body if (body or {}).get("status", {}).get("phase") == "Ready" else None

    return dict(kube.wait_for(f"session {name} Ready", ready, timeout=120, interval=0.5))


def _refused_soon(kube: Kube, namespace: str, pod: str, url: str, timeout: float = 60) -> str:
    """Poll until `pod` can no longer fetch `url` (policies take a moment to be programmed)."""
    deadline = time.monotonic() + timeout
    reply = ""
    while time.monotonic() < deadline:
        reply = _fetch_from_pod(kube, namespace, pod, url, timeout=1)
        if not reply.startswith("ok"):
            return reply
        time.sleep(0.5)
    return reply


def _answers_soon(kube: Kube, namespace: str, pod: str, url: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    reply = ""
    while time.monotonic() < deadline:
        reply = _fetch_from_pod(kube, namespace, pod, url, timeout=1)
        if reply.startswith("ok"):
            return reply
        time.sleep(0.5)
    return reply


@pytest.mark.realnode
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_tenant_b_cannot_reach_a_session_but_the_client_of_a_can(
    kube: Kube, namespace: str, tenant_b: str, operator: OperatorProcess, runtime: str | None
) -> None:
    """A warm-pool pod adopted by the session: only labelled pods of namespace A reach it (its sandbox
    under runc, or under gVisor: whose netstack answers from the pod's veth, behind kube-router's rules)."""
    kube.apply(
        manifests.template("py", manifests.PYTHON_RUNTIME_IMAGE, runtime_class=runtime),
        manifests.warm_pool("pool", "py", 1),
        namespace=namespace,
    )
    # The warm sandbox is Ready before the session exists, so the session adopts it.
    kube.wait_for(
        "a Ready warm sandbox",
        lambda: any(kube.is_true(s, "Ready") for s in kube.list("sandboxes", namespace)),
        timeout=120,
    )
    kube.apply(manifests.session("s1", "pool"), namespace=namespace)
    kube.apply(_pod("client", ["sleep", "600"], labels=CLIENT), namespace=namespace)
    kube.apply(_pod("stranger", ["sleep", "600"], labels={"role": "other"}), namespace=namespace)
    kube.apply(_pod("intruder", ["sleep", "600"], labels=CLIENT), namespace=tenant_b)
    session = _ready_session(kube, namespace, "s1")
    assert session["status"].get("launchType") == "warm", session["status"]
    for pod, ns in (("client", namespace), ("stranger", namespace), ("intruder", tenant_b)):
        _running(kube, pod, ns)
    url = f"http://{session['status']['podIPs'][0]}:{RUNTIME_PORT}/"

    assert _refused_soon(kube, tenant_b, "intruder", url).startswith("error"), "tenant B reached A's sandbox"
    assert _fetch_from_pod(kube, namespace, "stranger", url).startswith("error"), "an unlabelled pod got in"
    assert _fetch_from_pod(kube, namespace, "client", url) == "ok 200"

    uid = session["metadata"]["uid"]
    policies = [
        p
        for p in kube.list("networkpolicies", namespace)
        if any(r.get("uid") == uid and r.get("controller") for r in p["metadata"].get("ownerReferences") or [])
    ]
    assert len(policies) == 1, policies
    isolated = kube.condition(kube.get("agentsession", "s1", namespace), "NetworkIsolated")
    assert isolated is not None and isolated["status"] == "True", isolated


def _egress_policy(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSessionPolicy",
        "metadata": {"name": "egress"},
        "spec": {"egress": spec},
    }


@pytest.mark.realnode
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_sandbox_egress_is_what_the_policy_allows(
    kube: Kube, namespace: str, tenant_b: str, operator: OperatorProcess, runtime: str | None
) -> None:
    """By default a sandbox reaches nothing in the cluster (here: a server of tenant B); a policy that
    allows that server's address and port opens exactly that (the sandbox under runc or gVisor)."""
    kube.apply(
        manifests.template("py", manifests.PYTHON_RUNTIME_IMAGE, runtime_class=runtime),
        manifests.warm_pool("pool", "py", 0),
        namespace=namespace,
    )
    two_ports = "python3 -m http.server 8081 --directory / & exec python3 -m http.server 8080 --directory /"
    kube.apply(_pod("server", ["sh", "-c", two_ports], labels={"app": "server"}), namespace=tenant_b)
    server_ip = _running(kube, "server", tenant_b)["status"]["podIP"]
    name = f"e-{uuid.uuid4().hex[:6]}"
    kube.apply(manifests.session(name, "pool"), namespace=namespace)
    pod = _ready_session(kube, namespace, name)["status"]["podName"]
    url = f"http://{server_ip}:8080/"

    assert _refused_soon(kube, namespace, pod, url).startswith("error"), "the sandbox reached another namespace"

    kube.apply(_egress_policy({"allowCIDRs": [f"{server_ip}/32"], "ports": [{"port": 8080}]}), namespace=namespace)
    assert _answers_soon(kube, namespace, pod, url) == "ok 200", "the allowed address stayed closed"
    # Only that port: the same server on its other port stays closed.
    assert _fetch_from_pod(kube, namespace, pod, f"http://{server_ip}:8081/", timeout=1).startswith("error")

    kube.run("delete", "agentsessionpolicy", "egress", "-n", namespace)
    assert _refused_soon(kube, namespace, pod, url).startswith("error"), "egress stayed open after the policy went"


def test_each_session_owns_its_network_policy_and_gets_it_back(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Both nodes (the kwok node enforces nothing, but the object must exist): one NetworkPolicy per
    session, owned by it, selecting its claim's Pod; deleted by hand, it comes back; gone with the session."""
    kube.apply(manifests.template("pause"), manifests.warm_pool("pool", "pause", 0), namespace=namespace)
    kube.apply(manifests.session("s1", "pool"), namespace=namespace)
    session = _ready_session(kube, namespace, "s1")
    claim = kube.get("sandboxclaim", session["status"]["claimName"], namespace)
    assert claim is not None

    def owned() -> list[dict[str, Any]]:
        uid = session["metadata"]["uid"]
        return [
            p
            for p in kube.list("networkpolicies", namespace)
            if any(r.get("uid") == uid and r.get("controller") for r in p["metadata"].get("ownerReferences") or [])
        ]

    (policy,) = kube.wait_for("the session's NetworkPolicy", owned, timeout=30)
    assert policy["spec"]["podSelector"] == {"matchLabels": {"agents.x-k8s.io/claim-uid": claim["metadata"]["uid"]}}
    pod = kube.get("pod", session["status"]["podName"], namespace)
    assert (pod or {}).get("metadata", {}).get("labels", {}).get("agents.x-k8s.io/claim-uid") == claim["metadata"][
        "uid"
    ]
    assert kube.is_true(kube.get("agentsession", "s1", namespace), "NetworkIsolated")

    kube.run("delete", "networkpolicy", policy["metadata"]["name"], "-n", namespace)
    kube.wait_for(
        "the NetworkPolicy put back",
        lambda: [p for p in owned() if p["metadata"]["uid"] != policy["metadata"]["uid"]],
        timeout=30,
    )

    kube.run("delete", "agentsession", "s1", "-n", namespace)
    kube.wait_for("the NetworkPolicy gone with its session", lambda: not owned(), timeout=60)


def test_the_written_policy_closes_link_local_metadata_and_private_ranges_with_cluster_cidrs(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Issue 28 item 8, the object the operator writes (the kwok node enforces nothing; kube-router on the
    real node enforces what is written). The operator runs with --cluster-cidr (testkit.operator_args): a
    policy allowing the whole internet must still leave out every private range (nodes, the VPC), the
    given cluster ranges, link-local and every cloud's metadata address. Before: --cluster-cidr replaced
    the private ranges, and only 169.254.169.254/32 and fd00:ec2::254/128 of the rest were cut out."""
    import ipaddress

    from testkit.operator_args import network_args

    cluster = [a.split("=", 1)[1] for a in network_args() if a.startswith("--cluster-cidr=")]
    kube.apply(_egress_policy({"allowCIDRs": ["0.0.0.0/0", "::/0"], "ports": [{"port": 443}]}), namespace=namespace)
    kube.apply(manifests.template("pause"), manifests.warm_pool("pool", "pause", 0), namespace=namespace)
    kube.apply(manifests.session("s1", "pool"), namespace=namespace)
    uid = _ready_session(kube, namespace, "s1")["metadata"]["uid"]

    def written() -> list[dict[str, Any]] | None:
        for p in kube.list("networkpolicies", namespace):
            if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or []):
                return p["spec"].get("egress") or None
        return None

    (rule,) = kube.wait_for("the session's NetworkPolicy with its egress", written, timeout=30)
    blocks = {ipaddress.ip_network(peer["ipBlock"]["cidr"]).version: peer["ipBlock"] for peer in rule["to"]}
    assert blocks[4]["cidr"] == "0.0.0.0/0" and blocks[6]["cidr"] == "::/0", rule
    v4 = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"}
    v4 |= {"169.254.0.0/16", "168.63.129.16/32", "100.100.100.200/32", *cluster}
    assert v4 <= set(blocks[4]["except"]), blocks[4]
    assert {"fc00::/7", "fe80::/10", "fd00:ec2::/32"} <= set(blocks[6]["except"]), blocks[6]
    assert rule["ports"] == [{"protocol": "TCP", "port": 443}]


def test_a_session_is_ready_only_after_its_pod_carries_the_label_its_policy_selects(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Warm-pool adoptions: agent-sandbox can mark the claim Ready before it relabels the adopted Pod with
    the claim's UID, the label the session's NetworkPolicy selects; a session Ready before that sends its
    client to a Pod only the template's policy covers (refused on the real node). The session's Ready must
    be written after the label. Both writes are ordered by their resourceVersions, read from watches
    (etcd revisions on this cluster: comparable, though the API calls them opaque)."""
    from kubernetes import client, config, watch

    config.load_kube_config(config_file=kube.kubeconfig)
    custom, core = client.CustomObjectsApi(), client.CoreV1Api()
    count = 4
    kube.apply(manifests.template("pause"), manifests.warm_pool("pool", "pause", count), namespace=namespace)
    kube.wait_for(
        f"{count} Ready warm sandboxes",
        lambda: sum(kube.is_true(s, "Ready") for s in kube.list("sandboxes", namespace)) >= count,
        timeout=120,
    )
    seen: list[tuple[str, int, dict[str, Any]]] = []
    start = core.list_namespaced_pod(namespace).metadata.resource_version

    def collect(kind: str, lister: Callable[..., Any], *args: str) -> None:
        for event in watch.Watch().stream(lister, *args, resource_version=start, timeout_seconds=60):
            body = event["object"]
            body = body if isinstance(body, dict) else client.ApiClient().sanitize_for_serialization(body)
            seen.append((kind, int(body["metadata"]["resourceVersion"]), body))
            if len(_first_ready(seen)) == count:
                return

    sessions = ("agentsession.dev", "v1alpha1", namespace, "agentsessions")
    watches: list[tuple[Any, ...]] = [("pod", core.list_namespaced_pod, namespace)]
    watches.append(("session", custom.list_namespaced_custom_object, *sessions))
    threads = [threading.Thread(target=collect, args=args, daemon=True) for args in watches]
    for t in threads:
        t.start()
    kube.apply(*(manifests.session(f"s{i}", "pool") for i in range(count)), namespace=namespace)
    for i in range(count):
        _ready_session(kube, namespace, f"s{i}")
    for t in threads:
        t.join(timeout=90)
    for name, (ready_at, session) in _first_ready(seen).items():
        claim = kube.get("sandboxclaim", session["status"]["claimName"], namespace)
        assert claim is not None and session["status"].get("launchType") == "warm", session["status"]
        labelled = [
            rv
            for k, rv, b in seen
            if k == "pod"
            and b["metadata"]["name"] == session["status"]["podName"]
            and (b["metadata"].get("labels") or {}).get(SANDBOX_CLAIM_UID_LABEL) == claim["metadata"]["uid"]
        ]
        assert labelled, f"{name}: its pod was never seen with the claim's label"
        assert min(labelled) < ready_at, f"{name}: Ready at rv {ready_at}, its Pod labelled at rv {min(labelled)}"


def _first_ready(seen: list[tuple[str, int, dict[str, Any]]]) -> dict[str, tuple[int, dict[str, Any]]]:
    """Each session's first Ready event: its resourceVersion and body."""
    first: dict[str, tuple[int, dict[str, Any]]] = {}
    for kind, rv, body in seen:
        name = body["metadata"]["name"]
        if kind == "session" and (body.get("status") or {}).get("phase") == "Ready" and name not in first:
            first[name] = (rv, body)
    return first
