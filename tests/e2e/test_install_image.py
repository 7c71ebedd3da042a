"""`make install` on the real node: the operator from its own image, applied with `kubectl apply -k config/`.

The operator runs as a Pod with its ServiceAccount, probes, a read-only root filesystem and Pod Security
"restricted"; the API server calls its admission webhook through the Service. `make uninstall` leaves
nothing behind. The host-process operator the other e2e tests share is stopped meanwhile (two operators
would both reconcile, and share one webhook configuration).
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
import urllib.error
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from agentsession_api.activity import format_activity
from agentsession_api.names import ANNOTATION_ACTIVITY as ACTIVITY
from devcluster import install
from devcluster.cluster import Cluster
from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

NS = install.NAMESPACE


@pytest.fixture(scope="module")
def installed(
    cluster: Cluster, kube: Kube, operator: OperatorProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    from tests.e2e import install as rbac

    operator.stop()
    # The host-process operator's configuration (a URL, failurePolicy Ignore: tests/e2e/install.py) goes;
    # config/ ships its own.
    kube.run("delete", "validatingwebhookconfiguration", "agentsession.dev", "--ignore-not-found")
    try:
        install.install(cluster)
        yield
    finally:
        install.uninstall(cluster)
        # uninstall deleted config/'s CRDs and the operator's ServiceAccount (so its token): the other tests
        # and their operator need both back.
        kube.wait_for("the operator's namespace gone", lambda: kube.get("namespace", NS) is None, timeout=120)
        kube.run("apply", "--server-side", "--force-conflicts", "-f", str(install.REPO_ROOT / "crds"))
        kube.run("wait", "--for=condition=Established", "--timeout=60s", "-f", str(install.REPO_ROOT / "crds"))
        operator.kubeconfig = rbac.service_account_kubeconfig(kube, cluster, tmp_path_factory.mktemp("rbac-again"))
        operator.start()


def _operator_pods(kube: Kube) -> list[dict]:
    # Right after a rollout the replaced Pods may still be terminating: count the live ones.
    return [
        p
        for p in kube.list("pod", NS, "app.kubernetes.io/name=agentsession-operator")
        if not p["metadata"].get("deletionTimestamp")
    ]


def _operator_pod(kube: Kube) -> dict:
    pods = _operator_pods(kube)
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]  # a leader and a hot standby
    return pods[0]


def test_operator_runs_from_its_image_as_a_restricted_pod(installed: None, kube: Kube) -> None:
    pod = _operator_pod(kube)
    assert kube.is_true(pod, "Ready"), pod["status"]
    container = pod["status"]["containerStatuses"][0]
    assert container["imageID"].startswith("ghcr.io/agentsession/operator@sha256:"), container
    assert container["restartCount"] == 0, container
    # What the kubelet enforced: the process runs as 65532 and cannot write its root filesystem.
    name = pod["metadata"]["name"]
    assert (
        kube.run("exec", "-n", NS, name, "--", "python", "-c", "import os; print(os.getuid())").stdout.strip()
        == "65532"
    )
    denied = kube.run("exec", "-n", NS, name, "--", "python", "-c", "open('/usr/x', 'w')", check=False)
    assert denied.returncode != 0 and "Read-only file system" in denied.stderr, denied
    namespace = kube.get("namespace", NS)
    assert namespace and namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_webhook_through_the_service_refuses_a_policy_violation(installed: None, kube: Kube, namespace: str) -> None:
    def registered() -> bool:
        config = kube.get("validatingwebhookconfiguration", "agentsession.dev")
        hooks = (config or {}).get("webhooks") or []
        return bool(hooks) and all(h["clientConfig"].get("service", {}).get("namespace") == NS for h in hooks)

    kube.wait_for("the webhook configuration naming the operator's Service", registered, timeout=60)
    policy = {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSessionPolicy",
        "metadata": {"name": "caps"},
        "spec": {"limits": {"maxTtl": "1h"}},
    }
    kube.apply(policy, namespace=namespace)
    refused = kube.apply(manifests.session("too-long", "py", ttl="10h"), namespace=namespace, check=False)
    assert refused.returncode != 0, refused.stdout
    assert "denied the request" in refused.stderr and "exceeds the policy maximum 1h" in refused.stderr, refused.stderr
    allowed = kube.apply(manifests.session("fine", "py", ttl="30m"), namespace=namespace, check=False)
    assert allowed.returncode == 0, allowed.stderr


def _connects(kube: Kube, namespace: str, pod: str, ip: str, port: int) -> bool:
    """A TCP connection from inside `pod` to ip:port (a refused handshake and a drop both count as no)."""
    script = f"import socket; socket.create_connection(({ip!r}, {port}), timeout=2).close(); print('ok')"
    proc = kube.run("exec", "-n", namespace, pod, "--", "python3", "-c", script, check=False)
    return proc.stdout.strip() == "ok"


def test_only_the_api_server_reaches_the_webhook_and_only_labelled_namespaces_the_metrics(
    installed: None, kube: Kube, namespace: str
) -> None:
    """Issue 11 item 2. Attack: a tenant's pod talks to the operator's webhook (its refusals list policy
    details) and scrapes its metrics. Before: both answered anyone. Now: config/'s NetworkPolicy admits the
    webhook port from the API server's address only (admission keeps working: the test above) and the
    metrics port from namespaces labelled agentsession.dev/metrics-scraper=true."""
    from tests.e2e.test_real_node import _pod, _running

    scraper = f"{namespace}-metrics"
    kube.run("create", "namespace", scraper)
    try:
        kube.run("label", "namespace", scraper, "agentsession.dev/metrics-scraper=true")
        kube.apply(_pod("tenant", ["sleep", "600"]), namespace=namespace)
        kube.apply(_pod("prometheus", ["sleep", "600"]), namespace=scraper)
        _running(kube, "tenant", namespace)
        _running(kube, "prometheus", scraper)
        ip = _operator_pod(kube)["status"]["podIP"]
        kube.wait_for("the scraper reaches the metrics", lambda: _connects(kube, scraper, "prometheus", ip, 8080))
        assert not _connects(kube, namespace, "tenant", ip, 9443), "a tenant's pod reached the webhook port"
        assert not _connects(kube, namespace, "tenant", ip, 8080), "a tenant's pod reached the metrics port"
        assert not _connects(kube, scraper, "prometheus", ip, 9443), "the scraper reached the webhook port"
    finally:
        kube.run("delete", "namespace", scraper, "--wait=false", check=False)


def test_a_caller_without_the_api_servers_certificate_gets_no_tls_session(
    installed: None, kube: Kube, cluster: Cluster, namespace: str
) -> None:
    """Issue 11 item 2. The NetworkPolicy admits the webhook port from the API server's address, an address
    others may share (the default admits every address until networkPolicy.apiServerCIDRs is set; here the
    host, where this test runs). make install turns on --webhook-client-ca/--webhook-client-name (the
    chart's webhook.clientAuth): from that very address, a caller without the API server's client
    certificate gets no TLS session, while admission through the API server works (the test above)."""
    from tests.e2e.test_security import _admission_review, _call_webhook

    pod = _operator_pod(kube)
    args = pod["spec"]["containers"][0]["args"]
    assert any(a.startswith("--webhook-client-ca=") for a in args), args
    ip = pod["status"]["podIP"]
    body = _admission_review(namespace, manifests.session("probe", "py", ttl="10h"))
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError, http.client.HTTPException)):
        _call_webhook(ip, 9443, body, None)
    pki = cluster.paths.pki
    answer = _call_webhook(ip, 9443, body, (pki / "apiserver-webhook-client.crt", pki / "apiserver-webhook-client.key"))
    assert "response" in answer, answer  # the API server's certificate is answered


POLICY_REFUSAL = 'admission webhook "policy.agentsession.dev" denied the request'


def try_create(kube: Kube, namespace: str, ttl: str, pool: str = "py") -> tuple[str, str]:
    """Create one session; ("admitted" | "refused-by-policy" | "refused-webhook-down", the API server's words)."""
    name = f"r-{uuid.uuid4().hex[:8]}"
    proc = kube.apply(manifests.session(name, pool, ttl=ttl), namespace=namespace, check=False)
    if proc.returncode == 0:
        return "admitted", name
    if POLICY_REFUSAL in proc.stderr:
        return "refused-by-policy", proc.stderr.strip()
    return "refused-webhook-down", proc.stderr.strip()


def test_admission_stays_on_through_a_rollout_and_fails_closed(installed: None, kube: Kube, namespace: str) -> None:
    """Item 10. Attack: during a restart or rollout (kopf removed its webhooks on shutdown, a new CA at each
    start, failurePolicy Ignore) a session breaking a policy was admitted. Now: two replicas share one
    certificate from a Secret, the shipped configuration fails closed, and a rollout keeps admission served;
    with no operator at all, a write is refused with an error that names the webhook."""
    kube.apply(
        {
            "apiVersion": "agentsession.dev/v1alpha1",
            "kind": "AgentSessionPolicy",
            "metadata": {"name": "caps"},
            "spec": {"limits": {"maxTtl": "1h"}},
        },
        namespace=namespace,
    )
    kube.wait_for(
        "the policy enforced at admission",
        lambda: try_create(kube, namespace, "10h")[0] == "refused-by-policy",
        timeout=60,
        interval=0.5,
    )
    before = kube.get("validatingwebhookconfiguration", "agentsession.dev")
    secret = kube.get("secret", "agentsession-webhook-cert", NS)
    assert before and secret and secret.get("data", {}).get("tls.crt")
    ca_bundle = before["webhooks"][0]["clientConfig"]["caBundle"]
    old_pods = {p["metadata"]["name"] for p in _operator_pods(kube)}

    kube.run("-n", NS, "rollout", "restart", f"deployment/{install.DEPLOYMENT}")
    outcomes: dict[str, list[str]] = {}
    compliant: dict[str, list[str]] = {}
    started = time.monotonic()
    done_at: float | None = None
    while done_at is None or time.monotonic() < done_at + 5:  # and 5 s after the rollout ended
        kind, detail = try_create(kube, namespace, "10h")
        outcomes.setdefault(kind, []).append(detail)
        kind, detail = try_create(kube, namespace, "30m")
        compliant.setdefault(kind, []).append(detail)
        if done_at is None:
            status = kube.run(
                "-n", NS, "rollout", "status", f"deployment/{install.DEPLOYMENT}", "--timeout=1s", check=False
            )
            if status.returncode == 0:
                done_at = time.monotonic()
        assert time.monotonic() - started < 300, "rollout not finished after 300 s"
    counts = {k: len(v) for k, v in outcomes.items()}
    allowed = {k: len(v) for k, v in compliant.items()}
    print(f"rollout {(done_at or 0) - started:.1f} s; violating: {counts}; compliant: {allowed}")
    assert "admitted" not in outcomes, f"a policy violation was admitted during the rollout: {outcomes['admitted']}"
    # Served throughout: every call answered by an operator (none failed closed for want of one).
    assert set(outcomes) == {"refused-by-policy"}, counts
    assert set(compliant) == {"admitted"}, {k: v[:2] for k, v in compliant.items()}
    assert not old_pods & {p["metadata"]["name"] for p in _operator_pods(kube)}, "the rollout replaced no Pod"
    # The configuration and the certificate survived both replicas' shutdowns, unchanged.
    after = kube.get("validatingwebhookconfiguration", "agentsession.dev")
    assert after and after["webhooks"][0]["clientConfig"]["caBundle"] == ca_bundle
    assert after["webhooks"][0]["failurePolicy"] == "Fail"
    assert (kube.get("secret", "agentsession-webhook-cert", NS) or {}).get("data") == secret["data"]

    # No operator at all: fails closed, with the webhook named.
    kube.run("-n", NS, "scale", f"deployment/{install.DEPLOYMENT}", "--replicas=0")
    try:
        kube.wait_for(
            "no operator Pod",
            lambda: not kube.list("pod", NS, "app.kubernetes.io/name=agentsession-operator"),
            timeout=90,
        )
        kind, error = try_create(kube, namespace, "10h")
        assert kind == "refused-webhook-down", error
        assert 'failed calling webhook "policy.agentsession.dev"' in error, error
        kind, error = try_create(kube, namespace, "30m")
        assert kind == "refused-webhook-down", error
        # The client's activity reports (metadata only) skip the webhook (matchConditions): still accepted.
        report = format_activity(datetime.now(UTC), 0)
        kube.run("annotate", "agentsession", compliant["admitted"][0], "-n", namespace, f"{ACTIVITY}={report}")
        # A spec change does not.
        patched = kube.run(
            "patch",
            "agentsession",
            compliant["admitted"][0],
            "-n",
            namespace,
            "--type=merge",
            "-p",
            '{"spec":{"ttl":"20m"}}',
            check=False,
        )
        assert patched.returncode != 0 and 'failed calling webhook "policy.agentsession.dev"' in patched.stderr
    finally:
        kube.run("-n", NS, "scale", f"deployment/{install.DEPLOYMENT}", "--replicas=2")
        kube.run("-n", NS, "rollout", "status", f"deployment/{install.DEPLOYMENT}", "--timeout=180s")
    kube.wait_for(
        "admission back",
        lambda: try_create(kube, namespace, "10h")[0] == "refused-by-policy",
        timeout=60,
        interval=0.5,
    )


def test_uninstall_leaves_nothing_behind(installed: None, cluster: Cluster, kube: Kube) -> None:
    install.uninstall(cluster)
    assert kube.get("namespace", NS) is None or kube.get("namespace", NS)["status"]["phase"] == "Terminating"  # type: ignore[index]
    for kind, name in (
        ("customresourcedefinition", "agentsessions.agentsession.dev"),
        ("customresourcedefinition", "agentsessionpolicies.agentsession.dev"),
        ("clusterrole", "agentsession-operator"),
        ("clusterrolebinding", "agentsession-operator"),
        ("validatingwebhookconfiguration", "agentsession.dev"),
    ):
        assert kube.get(kind, name) is None, f"{kind}/{name} left behind"
    left = json.loads(kube.run("get", "clusterroles,clusterrolebindings", "-o", "json").stdout)["items"]
    assert not [o["metadata"]["name"] for o in left if "agentsession" in o["metadata"]["name"]]
