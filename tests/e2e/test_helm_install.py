"""`helm install` on the real node: the chart installs the operator from its image, as the README says.

The release goes where the README's command puts it (no `--namespace`: Helm's record in `default`, the objects
in the chart's namespace). The dev cluster's objects for the host-process operator (its namespace, RBAC,
CRDs) are not Helm's and Helm refuses to adopt them, so they go first, as `make uninstall` removes them; the
host-process operator is stopped meanwhile and everything is put back afterwards.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

from devcluster import install
from devcluster.cluster import Cluster
from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

NS = install.NAMESPACE
RELEASE = "agentsession"
CHART = install.REPO_ROOT / "charts" / "agentsession"


def _helm(cluster: Cluster, helm: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm, "--kubeconfig", str(cluster.paths.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def helm_release(
    cluster: Cluster, kube: Kube, operator: OperatorProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    from devcluster import build, images
    from devcluster.realnode import network
    from tests.e2e import install as rbac

    build.build(build.HELM)  # cached after the first time
    helm = str(build.HELM.path("helm"))
    operator.stop()
    install.uninstall(cluster)
    kube.wait_for("the operator's namespace gone", lambda: kube.get("namespace", NS) is None, timeout=120)
    images.build_image(images.OPERATOR)
    images.push(images.OPERATOR, cluster.registry_address, images.OPERATOR.dir() / "push.log")
    try:
        started = time.monotonic()
        # As the README's `helm install`, with the API server's address for the webhook's NetworkPolicy.
        done = _helm(
            cluster,
            helm,
            "install",
            RELEASE,
            str(CHART),
            "-n",
            NS,
            "--create-namespace",
            "--set",
            f"networkPolicy.apiServerCIDRs={{{network.HOST_IP}/32}}",
            "--wait",
            "--timeout",
            "240s",
        )
        assert done.returncode == 0, done.stderr
        print(f"helm install: deployed and available in {time.monotonic() - started:.1f} s")
        yield helm
    finally:
        gone = _helm(cluster, helm, "uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "120s")
        assert gone.returncode == 0, gone.stderr
        # The release lived in the namespace `--create-namespace` made: Helm leaves that to its user.
        kube.run("delete", "namespace", NS, "--wait=false", check=False)
        kube.wait_for("the operator's namespace gone", lambda: kube.get("namespace", NS) is None, timeout=120)
        # Helm keeps the CRDs of a chart's crds/ (they are the users' data); the other tests need their
        # operator back, with config/'s RBAC.
        kube.run("apply", "--server-side", "--force-conflicts", "-f", str(install.REPO_ROOT / "crds"))
        kube.run("wait", "--for=condition=Established", "--timeout=60s", "-f", str(install.REPO_ROOT / "crds"))
        operator.kubeconfig = rbac.service_account_kubeconfig(kube, cluster, tmp_path_factory.mktemp("rbac-helm"))
        operator.start()


def test_chart_installs_the_operator_from_its_image(helm_release: str, cluster: Cluster, kube: Kube) -> None:
    listed = _helm(cluster, helm_release, "status", RELEASE, "-n", NS, "-o", "json")
    assert listed.returncode == 0 and '"status":"deployed"' in listed.stdout.replace(" ", ""), listed.stdout[:400]
    pods = [
        p
        for p in kube.list("pod", NS, "app.kubernetes.io/name=agentsession-operator")
        if not p["metadata"].get("deletionTimestamp")
    ]
    assert pods and all(kube.is_true(p, "Ready") for p in pods), [p.get("status") for p in pods]
    for pod in pods:
        container = pod["status"]["containerStatuses"][0]
        assert container["imageID"].startswith("ghcr.io/agentsession/operator@sha256:"), container
    webhook = kube.get("validatingwebhookconfiguration", "agentsession.dev")
    assert webhook is not None
    labels = webhook["metadata"].get("labels") or {}
    assert labels.get("app.kubernetes.io/managed-by") == "Helm", labels


def test_admission_and_reconciling_work_through_the_chart(helm_release: str, kube: Kube, namespace: str) -> None:
    kube.apply(
        {
            "apiVersion": "agentsession.dev/v1alpha1",
            "kind": "AgentSessionPolicy",
            "metadata": {"name": "caps"},
            "spec": {"limits": {"maxTtl": "1h"}},
        },
        namespace=namespace,
    )

    def refused() -> bool:
        proc = kube.apply(manifests.session("too-long", "pool", ttl="10h"), namespace=namespace, check=False)
        return proc.returncode != 0 and "exceeds the policy maximum 1h" in proc.stderr

    kube.wait_for("the chart's webhook refusing a policy violation", refused, timeout=60, interval=0.5)
    kube.apply(manifests.template("pause"), namespace=namespace)
    kube.apply(manifests.warm_pool("pool", "pause", replicas=1), namespace=namespace)
    kube.apply(manifests.session("fine", "pool", ttl="30m"), namespace=namespace)

    def ready() -> bool:
        session = kube.get("agentsession", "fine", namespace)
        return bool(session) and (session.get("status") or {}).get("phase") == "Ready"

    kube.wait_for("a session Ready under the chart's operator", ready, timeout=120, interval=0.5)
