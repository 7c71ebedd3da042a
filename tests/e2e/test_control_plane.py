"""The local control plane is a real one: API server, scheduler, GC, admission, RBAC, agent-sandbox."""

from __future__ import annotations

import base64
import ipaddress
import itertools
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from devcluster import kubeconfig, pki
from devcluster.cluster import NODE_NAME, POD_CIDR, Cluster
from testkit import manifests
from tests.e2e.conftest import Kube

pytestmark = pytest.mark.e2e

AGENT_SANDBOX_CRDS = (
    "sandboxes.agents.x-k8s.io",
    "sandboxclaims.extensions.agents.x-k8s.io",
    "sandboxtemplates.extensions.agents.x-k8s.io",
    "sandboxwarmpools.extensions.agents.x-k8s.io",
)


def test_apiserver_ready_and_versioned(cluster: Cluster) -> None:
    assert cluster.api_get("/readyz") == b"ok"
    version = json.loads(cluster.api_get("/version"))
    assert version["gitVersion"].startswith("v1.37."), version


def test_agent_sandbox_crds_established(kube: Kube) -> None:
    for crd in AGENT_SANDBOX_CRDS:
        assert kube.is_true(kube.get("crd", crd), "Established"), crd


@pytest.mark.kwoknode(reason="the fake node and its loopback pod IPs (the real node: test_real_node)")
def test_plain_pod_scheduled_on_fake_node_with_loopback_ip(kube: Kube, namespace: str) -> None:
    kube.apply(manifests.pod("plain"), namespace=namespace)
    pod = kube.wait_for(
        "pod Ready", lambda: (p := kube.get("pod", "plain", namespace)) and kube.is_true(p, "Ready") and p, timeout=60
    )
    assert pod["spec"]["nodeName"] == NODE_NAME
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(POD_CIDR), pod["status"]
    kube.run("delete", "pod", "plain", "-n", namespace, "--timeout=60s")
    assert kube.get("pod", "plain", namespace) is None


def _claim_ready(kube: Kube, name: str, namespace: str) -> dict:
    return kube.wait_for(
        f"claim {name} Ready",
        lambda: (c := kube.get("sandboxclaim", name, namespace)) and kube.is_true(c, "Ready") and c,
        timeout=90,
    )


def test_pause_claim_cold_then_warm_adoption_and_gc(kube: Kube, namespace: str) -> None:
    kube.apply(
        manifests.template("pause"),
        manifests.warm_pool("cold", "pause", 0),
        manifests.claim("c1", "cold"),
        namespace=namespace,
    )
    claim = _claim_ready(kube, "c1", namespace)
    sandbox_name = claim["status"]["sandbox"]["name"]
    assert sandbox_name == "c1"  # cold start: the Sandbox is named after the claim
    assert kube.get("sandbox", sandbox_name, namespace) is not None
    assert kube.get("pod", sandbox_name, namespace) is not None

    kube.apply(manifests.warm_pool("warm", "pause", 2), namespace=namespace)
    kube.wait_for(
        "two warm sandboxes Ready",
        lambda: (
            sum(
                kube.is_true(s, "Ready")
                for s in kube.list("sandbox", namespace)
                if s["metadata"]["name"].startswith("warm-")
            )
            >= 2
        ),
        timeout=90,
    )
    kube.apply(manifests.claim("c2", "warm"), namespace=namespace)
    adopted = _claim_ready(kube, "c2", namespace)["status"]["sandbox"]["name"]
    assert adopted.startswith("warm-"), adopted  # adopted from the pool, not created for the claim

    kube.run("delete", "sandboxclaim", "c1", "c2", "-n", namespace, "--timeout=60s")
    for name in (sandbox_name, adopted):
        kube.wait_for(f"sandbox {name} collected", lambda n=name: kube.get("sandbox", n, namespace) is None)
        kube.wait_for(f"pod {name} collected", lambda n=name: kube.get("pod", n, namespace) is None)


def test_validating_admission_policy(kube: Kube, namespace: str) -> None:
    kube.run("label", "namespace", namespace, "e2e-vap=on")
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": f"no-forbidden-{namespace}"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["configmaps"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": "!has(object.data) || !('forbidden' in object.data)",
                    "message": "data.forbidden is not allowed",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": f"no-forbidden-{namespace}"},
        "spec": {
            "policyName": f"no-forbidden-{namespace}",
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"e2e-vap": "on"}}},
        },
    }
    try:
        kube.apply(policy, binding)

        attempts = itertools.count()

        def refused() -> bool:
            # A new name each try: re-applying an unchanged object sends no request to admit.
            proc = kube.apply(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"bad-{next(attempts)}"},
                    "data": {"forbidden": "x"},
                },
                namespace=namespace,
                check=False,
            )
            return proc.returncode != 0 and "data.forbidden is not allowed" in proc.stderr

        kube.wait_for("the policy to refuse", refused, timeout=30, interval=0.5)
        kube.apply(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "good"}, "data": {"ok": "x"}},
            namespace=namespace,
        )
    finally:
        kube.run("delete", "validatingadmissionpolicybinding", f"no-forbidden-{namespace}", check=False)
        kube.run("delete", "validatingadmissionpolicy", f"no-forbidden-{namespace}", check=False)


class _DenyHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        obj = review["request"]["object"]
        denied = (obj.get("metadata", {}).get("labels") or {}).get("e2e-deny") == "true"
        response = {"uid": review["request"]["uid"], "allowed": not denied}
        if denied:
            response["status"] = {"code": 403, "message": "denied by the e2e webhook"}
        body = json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook_server(tmp_path: Path) -> Iterator[tuple[int, bytes]]:
    ca = pki.make_ca(tmp_path, "webhook-ca", "e2e-webhook-ca")
    serving = pki.issue(ca, tmp_path, "webhook", "webhook", server_names=("127.0.0.1",))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _DenyHandler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(serving.cert, serving.key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], ca.cert.read_bytes()
    finally:
        server.shutdown()
        server.server_close()


def test_admission_webhook_on_loopback(kube: Kube, namespace: str, webhook_server: tuple[int, bytes]) -> None:
    port, ca_pem = webhook_server
    name = f"e2e-deny-{namespace}"
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "deny.e2e.agentsession.dev",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}/validate",
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
                "rules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 5,
            }
        ],
    }
    try:
        kube.apply(config)

        attempts = itertools.count()

        def refused() -> bool:
            proc = kube.apply(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"deny-me-{next(attempts)}", "labels": {"e2e-deny": "true"}},
                },
                namespace=namespace,
                check=False,
            )
            return proc.returncode != 0 and "denied by the e2e webhook" in proc.stderr

        kube.wait_for("the webhook to refuse", refused, timeout=30, interval=0.5)
        kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "allow-me"}}, namespace=namespace)
    finally:
        kube.run("delete", "validatingwebhookconfiguration", name, check=False)


def test_pod_security_restricted(kube: Kube, namespace: str) -> None:
    kube.run("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    privileged = manifests.pod("privileged")
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    proc = kube.apply(privileged, namespace=namespace, check=False)
    assert proc.returncode != 0 and "violates PodSecurity" in proc.stderr, proc.stderr
    compliant = manifests.pod("compliant")
    compliant["spec"]["securityContext"] = {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    compliant["spec"]["containers"][0]["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    kube.apply(compliant, namespace=namespace)


def test_service_account_token_and_rbac(kube: Kube, namespace: str, cluster: Cluster, tmp_path: Path) -> None:
    kube.run("create", "serviceaccount", "reader", "-n", namespace)
    kube.run("create", "role", "cm-reader", "--verb=get,list", "--resource=configmaps", "-n", namespace)
    kube.run(
        "create",
        "rolebinding",
        "cm-reader",
        "--role=cm-reader",
        f"--serviceaccount={namespace}:reader",
        "-n",
        namespace,
    )
    token = kube.run("create", "token", "reader", "-n", namespace, "--duration=10m").stdout.strip()
    config = kubeconfig.write_token(
        tmp_path / "reader.kubeconfig", cluster.server, cluster.paths.pki / "ca.crt", token, "reader", namespace
    )
    whoami = kube.run("auth", "whoami", "-o", "json", kubeconfig=str(config))
    assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:reader"
    kube.wait_for(
        "RBAC to allow configmaps",
        lambda: kube.run("get", "configmaps", kubeconfig=str(config), check=False).returncode == 0,
    )
    denied = kube.run("get", "secrets", kubeconfig=str(config), check=False)
    assert denied.returncode != 0 and "Forbidden" in denied.stderr
    assert kube.run("auth", "can-i", "list", "secrets", kubeconfig=str(config), check=False).stdout.strip() == "no"


def test_agent_sandbox_label_allowlist_from_configmap(kube: Kube, namespace: str, cluster: Cluster) -> None:
    """The controller honours agent-sandbox-config: a label domain is refused until the ConfigMap allows it."""
    kube.apply(manifests.template("pause"), manifests.warm_pool("pool", "pause", 0), namespace=namespace)
    labelled = manifests.claim("refused", "pool", additionalPodMetadata={"labels": {"e2e.example/team": "a"}})
    kube.apply(labelled, namespace=namespace)
    reason = kube.wait_for(
        "claim refused",
        lambda: (
            (kube.condition(kube.get("sandboxclaim", "refused", namespace), "Ready") or {}).get("reason")
            == "InvalidMetadata"
        ),
        timeout=60,
    )
    assert reason
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "agent-sandbox-config", "namespace": "agent-sandbox-system"},
            "data": {"allowed-label-domains": "sandbox.users.io,e2e.example"},
        }
    )
    try:
        cluster.start_agent_sandbox_controller()
        allowed = manifests.claim("allowed", "pool", additionalPodMetadata={"labels": {"e2e.example/team": "a"}})
        kube.apply(allowed, namespace=namespace)
        claim = _claim_ready(kube, "allowed", namespace)
        pod = kube.get("pod", claim["status"]["sandbox"]["name"], namespace)
        assert pod is not None and pod["metadata"]["labels"]["e2e.example/team"] == "a"
    finally:
        kube.run("delete", "configmap", "agent-sandbox-config", "-n", "agent-sandbox-system", check=False)
        cluster.start_agent_sandbox_controller()
