"""OpenShift-style arbitrary UIDs on the real node (issue 27): the hardened sample template without its
user ids, the ids assigned at admission as OpenShift's restricted SCC assigns them.

OpenShift's `restricted-v2` SCC gives every Pod of a namespace a UID from the namespace's range (e.g.
1000680000), an fsGroup from the same range, and no group: the process runs with GID 0. Here a
MutatingAdmissionPolicy (admissionregistration v1, GA in 1.36) plays the SCC for one namespace, so the
template carries no `runAsUser`, `runAsGroup` or `fsGroup`, as docs/operations.md tells OpenShift users
to ship it. The session is reached by the client as an agent reaches it: files, execute, grep.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from langchain_k8s_client import AgentSessionSandbox
from testkit import manifests
from tests.e2e.conftest import RUNTIMES, Kube, OperatorProcess
from tests.e2e.test_install import POOL_SAMPLE, TEMPLATE_SAMPLE, by_kind, load, restricted
from tests.opskit import openshift
from tests.opskit.openshift import UID

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

ASSIGNED_IDS = ("runAsUser", "runAsGroup", "fsGroup")


def without_ids(template: dict[str, Any]) -> dict[str, Any]:
    """The sample template as OpenShift users ship it: no user or group ids anywhere (the SCC assigns them)."""
    spec = template["spec"]["podTemplate"]["spec"]
    for context in [spec["securityContext"], *(c.get("securityContext") or {} for c in spec["containers"])]:
        for key in ASSIGNED_IDS:
            context.pop(key, None)
    return template


@pytest.fixture(params=RUNTIMES)
def openshift_namespace(request: pytest.FixtureRequest, kube: Kube, operator: OperatorProcess) -> Iterator[str]:
    name = f"ocp-{uuid.uuid4().hex[:6]}"
    kube.run("create", "namespace", name)
    scc = openshift.assign_ids(f"scc-{name}", name)
    kube.apply(*scc)
    template = without_ids(by_kind(load(TEMPLATE_SAMPLE), "SandboxTemplate"))
    if request.param is None:
        template["spec"]["podTemplate"]["spec"].pop("runtimeClassName")  # runc
    pool = by_kind(load(POOL_SAMPLE), "SandboxWarmPool")
    pool["spec"]["replicas"] = 0
    try:
        # The policy takes a moment to be served: a pod created before would run as the image's user.
        probe = manifests.pod("scc-probe", securityContext={"runAsNonRoot": True})
        kube.wait_for(
            "the SCC-like policy assigning UIDs",
            lambda: _admitted_uid(kube, name, probe) == UID,
            timeout=60,
            interval=1,
        )
        restricted(kube, name)  # after the probe (a bare pause Pod): the sandboxes' Pods pass "restricted"
        kube.apply(template, pool, namespace=name)
        yield name
    finally:
        kube.run("delete", "namespace", name, "--wait=false", check=False)
        for doc in reversed(scc):
            kube.run("delete", doc["kind"].lower(), doc["metadata"]["name"], "--ignore-not-found", check=False)


def _admitted_uid(kube: Kube, namespace: str, pod: dict[str, Any]) -> int | None:
    """The UID the API server's admission gives `pod` (a server-side dry run: nothing created)."""
    import json

    import yaml

    proc = kube.run("create", "--dry-run=server", "-o", "json", "-n", namespace, "-f", "-", input=yaml.safe_dump(pod))
    return json.loads(proc.stdout)["spec"].get("securityContext", {}).get("runAsUser")


def test_a_session_runs_under_an_arbitrary_uid_with_gid_0(openshift_namespace: str, kube: Kube) -> None:
    with AgentSessionSandbox("ocp", openshift_namespace, warm_pool="python-pool", ttl="10m") as sandbox:
        view = sandbox.wait_ready()
        pod = kube.get("pod", view.pod_name or "", openshift_namespace)
        assert pod is not None
        assert pod["spec"]["securityContext"]["runAsUser"] == UID and "runAsGroup" not in pod["spec"]["securityContext"]
        ids = sandbox.execute("id -u; id -g; id -G")
        uid, gid, *groups = ids.output.split()
        assert ids.exit_code == 0 and (uid, gid) == (str(UID), "0") and str(UID) in groups, ids
        # Files: the workspace (an emptyDir of the fsGroup) and /tmp (HOME) are writable; the root is not.
        assert sandbox.write("/workspace/src/a.py", "def needle():\n    pass\n").error is None
        assert sandbox.write("/workspace/src/b.txt", "no match here\n").error is None
        (down,) = sandbox.download_files(["/workspace/src/a.py"])
        assert down.content == b"def needle():\n    pass\n"
        assert sandbox.edit("/workspace/src/b.txt", "no match", "still no match").error is None
        made = sandbox.execute(
            'cd /workspace && python3 -c \'open("made.txt", "w").write("x")\' && stat -c %u made.txt'
        )
        assert made.exit_code == 0 and made.output.strip() == str(UID), made
        assert sandbox.execute("touch $HOME/x").exit_code == 0
        touched = sandbox.execute("touch /app/x")
        assert touched.exit_code != 0, touched
        found = sandbox.grep("needle", "/workspace/src")
        assert found.error is None and [(m["path"], m["line"]) for m in found.matches or []] == [
            ("/workspace/src/a.py", 1)
        ]
        globbed = sandbox.glob("*.py", "/workspace/src")
        assert globbed.error is None and [m["path"] for m in globbed.matches or []] == ["/workspace/src/a.py"]
