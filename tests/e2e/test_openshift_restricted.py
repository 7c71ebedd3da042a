"""The operator's pod passes OpenShift's restricted-v2 rules; the node agent's needs an SCC allowing host paths
and root (issue 52 item 5; no privileged container since issue 49 item 5).

tests/opskit/openshift.py plays restricted-v2 for one namespace with admission policies (ids assigned, the SCC's
refusals). Here the API server judges, with a server-side dry run, the Pods the chart's Deployment and
config/'s node agent DaemonSet would create there: what a ReplicaSet or DaemonSet controller would send.
The rules themselves are checked first, so that an admitted Pod means the rules held, not that no rule ran.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import build
from testkit import manifests
from tests.e2e.conftest import Kube
from tests.e2e.test_install import pod_from_template
from tests.integration.helm.test_chart import _template
from tests.opskit import openshift

pytestmark = [pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]


def _dry_run(kube: Kube, namespace: str, pod: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """The Pod as admission leaves it (a server-side dry run: nothing is created)."""
    return kube.run(
        "create", "--dry-run=server", "-o", "json", "-n", namespace, "-f", "-", input=yaml.safe_dump(pod), check=False
    )


@pytest.fixture(scope="module")
def ocp(kube: Kube) -> Iterator[str]:
    name = f"ocp-v2-{uuid.uuid4().hex[:6]}"
    kube.run("create", "namespace", name)
    for account in ("agentsession-operator", "agentsession-nodeagent"):  # the Pods' own, as installed
        kube.run("create", "serviceaccount", account, "-n", name)
    policies = openshift.restricted_v2(name, name)
    kube.apply(*policies)
    try:
        # Policies take a moment to be served: wait until a privileged Pod is refused and a plain one gets ids.
        privileged = manifests.pod("probe", securityContext={})
        privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
        kube.wait_for(
            "the restricted-v2 policies served",
            lambda: (
                "privileged containers are not allowed" in _dry_run(kube, name, privileged).stderr
                and json.loads(_dry_run(kube, name, manifests.pod("plain")).stdout or "{}")
                .get("spec", {})
                .get("securityContext", {})
                .get("runAsUser")
                == openshift.UID
            ),
            timeout=60,
            interval=1,
        )
        yield name
    finally:
        kube.run("delete", "namespace", name, "--wait=false", check=False)
        for doc in reversed(policies):
            kube.run("delete", doc["kind"].lower(), doc["metadata"]["name"], "--ignore-not-found", check=False)


def _with_container(**security: Any) -> dict[str, Any]:
    pod = manifests.pod("probe")
    pod["spec"]["containers"][0]["securityContext"] = security
    return pod


@pytest.mark.parametrize(
    ("pod", "refusal"),
    [
        (_with_container(allowPrivilegeEscalation=True), "allowPrivilegeEscalation must be false"),
        (_with_container(capabilities={"add": ["SYS_ADMIN"]}), "only NET_BIND_SERVICE"),
        (manifests.pod("probe", hostPID=True), "host network, PID and IPC"),
        (
            manifests.pod("probe", volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
            "no hostPath",
        ),
        (manifests.pod("probe", securityContext={"runAsUser": 65532}), "runAsUser must be in the namespace's range"),
        (_with_container(runAsUser=0), "runAsUser must be in the namespace's range"),
        (  # with a user of the range, as assigned ids are only given to a Pod that names no user
            manifests.pod("probe", securityContext={"runAsUser": openshift.UID, "fsGroup": 65532}),
            "fsGroup and supplementalGroups",
        ),
        (_with_container(seccompProfile={"type": "Unconfined"}), "seccomp profile must be RuntimeDefault"),
    ],
)
def test_each_rule_refuses_what_restricted_v2_refuses(kube: Kube, ocp: str, pod: dict[str, Any], refusal: str) -> None:
    refused = _dry_run(kube, ocp, pod)
    assert refused.returncode != 0 and refusal in refused.stderr, refused.stderr or refused.stdout[:300]


def _chart_pod(namespace: str) -> dict[str, Any]:
    """The Pod the chart's Deployment would create, rendered with its defaults (test_chart's helm template)."""
    build.build(build.HELM)  # cached after the first time
    rendered = _template(build.HELM.path("helm"), namespace=namespace)
    (deployment,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Deployment"]
    return pod_from_template("operator", deployment["spec"]["template"])


def test_the_charts_operator_pod_passes_restricted_v2_and_gets_the_ranges_ids(kube: Kube, ocp: str) -> None:
    """The chart's defaults: no fixed user, so the SCC's assigned one; every rule holds."""
    admitted = _dry_run(kube, ocp, _chart_pod(ocp))
    assert admitted.returncode == 0, admitted.stderr
    security = json.loads(admitted.stdout)["spec"]["securityContext"]
    assert security["runAsUser"] == openshift.UID and security["fsGroup"] == openshift.UID, security


def test_the_charts_pinned_user_is_refused_as_openshift_refuses_it(kube: Kube, ocp: str) -> None:
    """Pinning the image's user (podSecurityContext.runAsUser=65532, the chart's documented knob) is what
    OpenShift refuses: the test's policies do bite on the chart's own pod."""
    pod = _chart_pod(ocp)
    pod["spec"]["securityContext"]["runAsUser"] = 65532
    refused = _dry_run(kube, ocp, pod)
    assert refused.returncode != 0 and "runAsUser must be in the namespace's range" in refused.stderr, refused


def test_the_node_agent_needs_host_paths_and_root_not_a_privileged_container(kube: Kube, ocp: str) -> None:
    """runsc checkpoint needs the node's runsc state (host paths) and root, and nothing else: no privileged
    container, no capability (issue 49 item 5). restricted-v2 refuses the node agent's pod naming those two
    only (docs/operations.md: an SCC allowing host paths and any UID, hostmount-anyuid)."""
    daemonset = yaml.safe_load((ROOT / "config" / "components" / "nodeagent" / "daemonset.yaml").read_text())
    pod = pod_from_template("nodeagent", daemonset["spec"]["template"])
    container = pod["spec"]["containers"][0]
    # Admission names the first rule broken: each obstacle in turn, removed to show the next.
    obstacles: list[tuple[str, Callable[[], Any]]] = [
        ("no hostPath", lambda: (pod["spec"].pop("volumes"), container.pop("volumeMounts"))),
        ("runAsUser must be in the namespace's range", lambda: container["securityContext"].pop("runAsUser")),
    ]
    for rule, remove in obstacles:
        refused = _dry_run(kube, ocp, pod)
        assert refused.returncode != 0 and rule in refused.stderr, refused.stderr or refused.stdout[:300]
        assert "privileged" not in refused.stderr and "capabilities" not in refused.stderr, refused.stderr
        remove()
    assert _dry_run(kube, ocp, pod).returncode == 0  # nothing else in its way: those two are the SCC's
