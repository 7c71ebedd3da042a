"""Upgrades in place on the real node: from the previous release to this tree, with 50 live sessions.

Both ways a platform team upgrades: `helm upgrade` of the chart, and `kubectl apply -k config/` (what
`make install` runs). The previous release is the commit before this round's first change, built from
git: its operator image, its chart, its config/ and its CRDs. The CRDs go first, as docs/operations.md
says (Helm never upgrades a chart's crds/). Through the rollout a prober keeps creating a session that
breaks a policy: none may be admitted. Afterwards every session keeps its claim, its Sandbox and its Pod
(same UIDs, no container restart), and the new operator reconciles (a new session gets Ready).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import build, images, install
from devcluster.cluster import Cluster
from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess
from tests.e2e.test_install_image import try_create

pytestmark = [pytest.mark.e2e, pytest.mark.realnode, pytest.mark.slow]  # 8 to 10 min: make test-full

# The release before this round (a569144, the parent of the first commit of issue 27).
PREVIOUS = "a569144"
SESSIONS = 50
NS = install.NAMESPACE
RELEASE = "agentsession"


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, images.Image]:
    """The previous release's files (chart, config/, CRDs) and its operator image, built once."""
    commit = subprocess.run(
        ["git", "rev-parse", f"{PREVIOUS}^{{commit}}"], cwd=install.REPO_ROOT, capture_output=True, text=True
    )
    assert commit.returncode == 0, f"{PREVIOUS} not in this clone (shallow?): {commit.stderr.strip()}"
    tree = images.checkout_at(commit.stdout.strip(), ("charts", "config", "crds"), tmp_path_factory.mktemp("prev"))
    image = images.operator_at(commit.stdout.strip())
    images.build_image(image)
    return tree, image


@pytest.fixture(scope="module")
def host_operator_stopped(
    cluster: Cluster, kube: Kube, operator: OperatorProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """No host-process operator (two operators would both reconcile); put back afterwards with its CRDs."""
    from tests.e2e import install as rbac

    operator.stop()
    install.uninstall(cluster)  # the host operator's webhook configuration, config/'s objects and CRDs
    kube.wait_for("the operator's namespace gone", lambda: kube.get("namespace", NS) is None, timeout=120)
    images.build_image(images.OPERATOR)
    images.push(images.OPERATOR, cluster.registry_address, images.OPERATOR.dir() / "push.log")
    try:
        yield
    finally:
        crds = str(install.REPO_ROOT / "crds")
        kube.run("apply", "--server-side", "--force-conflicts", "-f", crds)
        kube.run("wait", "--for=condition=Established", "--timeout=60s", "-f", crds)
        operator.kubeconfig = rbac.service_account_kubeconfig(kube, cluster, tmp_path_factory.mktemp("rbac-upgrade"))
        operator.start()


def _apply_crds(kube: Kube, crds: Path) -> None:
    kube.run("apply", "--server-side", "--force-conflicts", "-f", str(crds))
    kube.run("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds))


class AdmissionProber:
    """Creates a policy-breaking session every 0.3 s from another thread, until stopped."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.outcomes: dict[str, list[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            kind, detail = try_create(self.kube, self.namespace, "10h", "pool")
            self.outcomes.setdefault(kind, []).append(detail)

    def __enter__(self) -> AdmissionProber:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=150)


def _seed(kube: Kube, namespace: str) -> dict[str, tuple[str, str, str]]:
    """A policy and 50 Ready sessions; their (claim UID, Sandbox UID, Pod UID) by session name."""
    policy = {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSessionPolicy",
        "metadata": {"name": "caps"},
        "spec": {"limits": {"maxTtl": "1h"}},
    }
    kube.apply(policy, manifests.template("pause"), manifests.warm_pool("pool", "pause"), namespace=namespace)
    kube.wait_for(
        "the previous operator enforcing the policy",
        lambda: try_create(kube, namespace, "10h", "pool")[0] == "refused-by-policy",
        timeout=120,
        interval=0.5,
    )
    names = [f"s{i:02d}" for i in range(SESSIONS)]
    kube.apply(*(manifests.session(n, "pool", ttl="50m") for n in names), namespace=namespace)
    kube.wait_for(f"{SESSIONS} sessions Ready", lambda: _all_ready(kube, namespace, names), timeout=420, interval=2)
    return _identities(kube, namespace, names)


def _all_ready(kube: Kube, namespace: str, names: list[str]) -> bool:
    ready = {
        s["metadata"]["name"]
        for s in kube.list("agentsession", namespace)
        if (s.get("status") or {}).get("phase") == "Ready"
    }
    return set(names) <= ready


def _identities(kube: Kube, namespace: str, names: list[str]) -> dict[str, tuple[str, str, str]]:
    sessions = {s["metadata"]["name"]: s for s in kube.list("agentsession", namespace)}
    claims = {c["metadata"]["name"]: c for c in kube.list("sandboxclaim", namespace)}
    sandboxes = {s["metadata"]["name"]: s for s in kube.list("sandbox", namespace)}
    pods = {p["metadata"]["name"]: p for p in kube.list("pod", namespace)}
    out = {}
    for name in names:
        status = sessions[name]["status"]
        claim = claims[status["claimName"]]
        sandbox_name = status.get("sandboxName") or claim["status"]["sandbox"]["name"]
        pod = pods[status["podName"]]
        restarts = sum(c.get("restartCount", 0) for c in pod["status"].get("containerStatuses") or [])
        assert restarts == 0, f"{name}: its pod's containers restarted {restarts} times"
        out[name] = (claim["metadata"]["uid"], sandboxes[sandbox_name]["metadata"]["uid"], pod["metadata"]["uid"])
    return out


def _upgrade_keeps_everything(kube: Kube, namespace: str, upgrade: Callable[[], None]) -> None:
    before = _seed(kube, namespace)
    started = time.monotonic()
    with AdmissionProber(kube, namespace) as prober:
        upgrade()
        took = time.monotonic() - started
        # The previous release's webhook server closes the API server's pooled connections when its pods
        # exit; a create written on one that instant fails with EOF (this release answers `Connection:
        # close`, see admission/server.py). The prober counts those; the create below waits them out.
        kube.wait_for("the previous release's pods gone", lambda: not _terminating_operator_pods(kube), timeout=90)
        # The new operator reconciles: a session created now gets Ready.
        kube.apply(manifests.session("after-upgrade", "pool", ttl="30m"), namespace=namespace)
        kube.wait_for(
            "a session Ready under the new operator",
            lambda: _all_ready(kube, namespace, ["after-upgrade"]),
            timeout=180,
            interval=1,
        )
    counts = {kind: len(v) for kind, v in prober.outcomes.items()}
    print(f"upgrade took {took:.1f} s; policy-breaking creates meanwhile: {counts}")
    assert "admitted" not in prober.outcomes, f"a policy violation was admitted: {prober.outcomes['admitted']}"
    assert prober.outcomes.get("refused-by-policy"), counts
    assert _all_ready(kube, namespace, list(before)), "a session left Ready"
    after = _identities(kube, namespace, list(before))
    changed = {n: (before[n], after[n]) for n in before if before[n] != after[n]}
    assert not changed, f"claims, Sandboxes or Pods replaced by the upgrade: {changed}"


def _delete_sessions(kube: Kube, namespace: str) -> None:
    """While an operator still runs: their finalizers need it, and uninstalling waits on them."""
    kube.run("delete", "agentsession", "--all", "-n", namespace, "--wait=false")
    kube.wait_for("the sessions gone", lambda: not kube.list("agentsession", namespace), timeout=300, interval=2)


def _terminating_operator_pods(kube: Kube) -> int:
    """How many of the operator's pods are still terminating."""
    pods = kube.list("pod", NS, "app.kubernetes.io/name=agentsession-operator")
    return sum(1 for p in pods if p["metadata"].get("deletionTimestamp"))


def _operator_image(kube: Kube) -> set[str]:
    pods = kube.list("pod", NS, "app.kubernetes.io/name=agentsession-operator")
    return {c["image"] for p in pods if not p["metadata"].get("deletionTimestamp") for c in p["spec"]["containers"]}


def _helm(cluster: Cluster, *args: str) -> None:
    helm = str(build.HELM.path("helm"))
    done = subprocess.run(
        [helm, "--kubeconfig", str(cluster.paths.kubeconfig), *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"helm {' '.join(args[:2])}: {done.stderr}"


def test_helm_upgrade_from_the_previous_release_keeps_every_session(
    host_operator_stopped: None,
    previous: tuple[Path, images.Image],
    cluster: Cluster,
    kube: Kube,
    namespace: str,
) -> None:
    from devcluster.realnode import network

    tree, old_image = previous
    build.build(build.HELM)
    images.push(old_image, cluster.registry_address, old_image.dir() / "push.log")
    api_server = f"networkPolicy.apiServerCIDRs={{{network.HOST_IP}/32}}"
    _apply_crds(kube, tree / "crds")
    old_tag = old_image.refs[0].rsplit(":", 1)[1]
    _helm(cluster, "install", RELEASE, str(tree / "charts" / "agentsession"), "--set", api_server,
          "--set", f"image.tag={old_tag}", "--wait", "--timeout", "240s")  # fmt: skip
    try:
        assert _operator_image(kube) == {old_image.refs[0]}

        def upgrade() -> None:
            _apply_crds(kube, install.REPO_ROOT / "crds")
            # A release installed before the chart took the release's namespace keeps its own (the upgrade
            # note in docs/operations.md): without these two, Helm would move the operator.
            _helm(cluster, "upgrade", RELEASE, str(install.REPO_ROOT / "charts" / "agentsession"), "--set",
                  api_server, "--set", f"namespace.name={NS}", "--set", "namespace.create=true",
                  "--wait", "--timeout", "240s")  # fmt: skip
            assert _operator_image(kube) == {images.OPERATOR_REF}

        _upgrade_keeps_everything(kube, namespace, upgrade)
    finally:
        _delete_sessions(kube, namespace)
        _helm(cluster, "uninstall", RELEASE, "--wait", "--timeout", "120s")
        kube.wait_for("the operator's namespace gone", lambda: kube.get("namespace", NS) is None, timeout=120)


def test_kubectl_apply_k_from_the_previous_release_keeps_every_session(
    host_operator_stopped: None,
    previous: tuple[Path, images.Image],
    cluster: Cluster,
    kube: Kube,
    namespace: str,
) -> None:
    tree, old_image = previous
    images.push(old_image, cluster.registry_address, old_image.dir() / "push.log")
    # The previous config/ with its own image, as a user pins a release's tag in an overlay.
    overlay: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["../config"],  # kustomize takes relative paths only
        "images": [{"name": images.OPERATOR_REF.rsplit(":", 1)[0], "newTag": old_image.refs[0].rsplit(":", 1)[1]}],
    }
    (tree / "pinned").mkdir(exist_ok=True)
    (tree / "pinned" / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    kube.run("apply", "--server-side", "--force-conflicts", "-k", str(tree / "pinned"))
    kube.run("wait", "--for=condition=Established", "--timeout=60s", "-f", str(tree / "crds"))
    install.narrow_webhook_ingress(cluster)
    install.require_api_server_certificate(cluster)
    kube.run("-n", NS, "rollout", "status", f"deployment/{install.DEPLOYMENT}", "--timeout=240s")
    try:
        assert _operator_image(kube) == {old_image.refs[0]}

        def upgrade() -> None:
            install.install(cluster)  # `make install`: config/ (with its CRDs) applied over the old one
            assert _operator_image(kube) == {images.OPERATOR_REF}

        _upgrade_keeps_everything(kube, namespace, upgrade)
    finally:
        _delete_sessions(kube, namespace)
        install.uninstall(cluster)
        kube.wait_for("the operator's namespace gone", lambda: kube.get("namespace", NS) is None, timeout=120)
