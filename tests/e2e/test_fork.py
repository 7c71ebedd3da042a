"""Forks end to end (spec.forkFrom): the real operator, agent-sandbox, the dev provisioner's clones and python
runtime pods. A file written in the source is in the fork; writes on either side stay on that side; the
policy and every error of issue 15 (source missing, source without volumes, a class that cannot clone) leave
a clear reason and no claim."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_k8s_client import AgentSessionSandbox, PolicyViolation, SessionManager
from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = [pytest.mark.e2e, pytest.mark.node]  # the runtime in a real pod
POOL = "fork-pool"
NO_CLONE = "no-clone"
SCRIPT = Path(sys.executable).parent / "kubectl-agentsession"


def workspace(storage_class: str | None = None) -> list[dict[str, Any]]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return [{"metadata": {"name": "workspace"}, "spec": spec}]


@pytest.fixture(scope="module")
def ns(kube: Kube, operator: OperatorProcess) -> Iterator[str]:
    name = f"fork-{uuid.uuid4().hex[:6]}"
    kube.run("create", "namespace", name)
    mount = [{"name": "workspace", "mountPath": "/workspace"}]
    template = manifests.template(
        "py",
        manifests.PYTHON_RUNTIME_IMAGE,
        vct_policy="Allowed",
        volume_mounts=mount,
        volumes=[{"name": "workspace", "emptyDir": {}}],
    )
    kube.apply(template, manifests.warm_pool(POOL, "py"), namespace=name)
    # A class the dev provisioner serves but that does not say it can clone.
    kube.apply(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": NO_CLONE},
            "provisioner": "devcluster.agentsession.dev/hostpath",
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
        }
    )
    yield name
    kube.run("delete", "namespace", name, "--wait=false", check=False)
    kube.run("delete", "storageclass", NO_CLONE, "--ignore-not-found", check=False)


def _session(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return kube.get("agentsession", name, ns) or {}


def _phase_reason(kube: Kube, ns: str, name: str) -> tuple[str | None, str | None]:
    body = _session(kube, ns, name)
    ready = kube.condition(body, "Ready") or {}
    return (body.get("status") or {}).get("phase"), ready.get("reason")


def _claims_of(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    return kube.list("sandboxclaims.extensions.agents.x-k8s.io", ns, f"agentsession.dev/session={name}")


def test_fork_starts_as_a_copy_and_then_diverges(kube: Kube, ns: str) -> None:
    with AgentSessionSandbox("src", ns, warm_pool=POOL, ttl="1h", volume_claim_templates=workspace()) as source:
        assert source.write("/workspace/notes.txt", "written in the source\n").error is None
        with source.fork("src-fork", keep=False) as fork:
            assert fork.read("/workspace/notes.txt").file_data is not None
            assert fork.execute("cat /workspace/notes.txt").output == "written in the source\n"
            # Each side's writes stay on that side.
            assert fork.execute("sh -c 'echo changed in the fork > /workspace/notes.txt'").exit_code == 0
            assert source.execute("sh -c 'echo after the fork > /workspace/later.txt'").exit_code == 0
            assert source.execute("cat /workspace/notes.txt").output == "written in the source\n"
            assert fork.execute("cat /workspace/notes.txt").output == "changed in the fork\n"
            assert fork.execute("ls /workspace").output.split() == ["notes.txt"]

            body = _session(kube, ns, "src-fork")
            assert body["spec"] == {"forkFrom": {"name": "src"}, "suspend": False}  # spec stays as written
            assert body["status"]["resolved"]["warmPoolRef"] == {"name": POOL}  # the source's pool
            (claim,) = _claims_of(kube, ns, "src-fork")
            (volume,) = claim["spec"]["volumeClaimTemplates"]
            source_pvc = f"workspace-{source.session.sandbox_name}"
            assert volume["spec"]["dataSource"] == {"kind": "PersistentVolumeClaim", "name": source_pvc}
            events = kube.run("get", "events", "-n", ns, "-o", "json").stdout
            forked = [e for e in json.loads(events)["items"] if e.get("reason") == "Forked"]
            assert forked and source_pvc in (forked[0].get("note") or forked[0].get("message") or "")


def test_manager_fork_with_the_source_suspended_for_the_copy(kube: Kube, ns: str) -> None:
    manager = SessionManager(ns, warm_pool=POOL, ttl="1h", volume_claim_templates=workspace())
    source = manager.get("thread-a")
    try:
        assert source.write("/workspace/plan.md", "# plan A\n").error is None
        fork = manager.fork("thread-a", "thread-b", suspend_source=True)
        assert fork.execute("cat /workspace/plan.md").output == "# plan A\n"
        # The source was resumed after the copy, with its file.
        assert source.execute("cat /workspace/plan.md").output == "# plan A\n"
        # (Not its phase at this instant: the test template's probe has failureThreshold 1, so a slow
        # probe on a busy machine may show Provisioning for a moment.)
        assert not source.session.suspend_requested
        assert {s.name for s in manager.list()} >= {manager.name_for("thread-a"), manager.name_for("thread-b")}
    finally:
        manager.delete("thread-b")
        manager.delete("thread-a")


def test_kubectl_plugin_fork(kube: Kube, ns: str) -> None:
    with AgentSessionSandbox("plug-src", ns, warm_pool=POOL, ttl="1h", volume_claim_templates=workspace()) as source:
        assert source.write("/workspace/a.txt", "from the source\n").error is None
        proc = subprocess.run(
            [str(SCRIPT), "fork", "plug-src", "plug-fork", "-n", ns, "--wait"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        assert "created (fork of plug-src)" in proc.stdout and "plug-fork: Ready" in proc.stderr
        read = subprocess.run(
            [str(SCRIPT), "exec", "plug-fork", "-n", ns, "--", "cat", "/workspace/a.txt"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert read.returncode == 0 and read.stdout == "from the source\n", read.stderr
        exact = subprocess.run(
            [str(SCRIPT), "fork", "plug-src", "plug-fork-2", "-n", ns, "--suspend-source"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert exact.returncode == 0, exact.stderr
        assert "copied while suspended" in exact.stdout and "plug-src: resumed" in exact.stderr
        assert not (_session(kube, ns, "plug-src").get("spec") or {}).get("suspend")
        kube.run("delete", "agentsession", "plug-fork", "plug-fork-2", "-n", ns)


def test_policy_refuses_forks(kube: Kube, ns: str) -> None:
    policy = {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSessionPolicy",
        "metadata": {"name": "no-forks"},
        "spec": {"selector": {"matchLabels": {"forks": "denied"}}, "limits": {"allowForks": False}},
    }
    kube.apply(policy, namespace=ns)
    with AgentSessionSandbox("pol-src", ns, warm_pool=POOL, ttl="1h", volume_claim_templates=workspace()) as source:
        source.wait_ready()

        def refused() -> str | None:
            try:
                AgentSessionSandbox("pol-fork", ns, fork_from="pol-src", session_labels={"forks": "denied"}, keep=True)
            except PolicyViolation as exc:
                return str(exc)
            kube.run("delete", "agentsession", "pol-fork", "-n", ns, "--wait=true")  # the policy was not seen yet
            return None

        message = kube.wait_for("the webhook to refuse the fork", refused, timeout=30, interval=1)
        assert "spec.forkFrom" in message and "allowForks: false" in message and "no-forks" in message
        # A session the policy does not select may fork.
        with source.fork("pol-fork-ok", keep=False) as fork:
            assert fork.wait_ready().phase == "Ready"
    kube.run("delete", "agentsessionpolicy", "no-forks", "-n", ns)


def test_admission_refuses_a_missing_source_and_another_namespace(kube: Kube, ns: str) -> None:
    missing = kube.apply(manifests.session("orphan-fork", forkFrom={"name": "nobody"}), namespace=ns, check=False)
    assert missing.returncode != 0
    assert "spec.forkFrom.name nobody" in missing.stderr and f"no AgentSession nobody in namespace {ns}" in (
        missing.stderr
    )
    # There is no field for another namespace: the schema refuses one.
    other = kube.apply(
        manifests.session("cross-fork", forkFrom={"name": "src", "namespace": "default"}), namespace=ns, check=False
    )
    assert other.returncode != 0 and "namespace" in other.stderr
    both = kube.apply(
        manifests.session("both-fork", forkFrom={"name": "src"}, volumeClaimTemplates=workspace()),
        namespace=ns,
        check=False,
    )
    assert both.returncode != 0 and "spec.forkFrom and spec.volumeClaimTemplates cannot both be set" in both.stderr


def test_source_deleted_before_the_copy_fails_the_fork_with_no_claim(kube: Kube, ns: str) -> None:
    # A source that never gets Ready (its pool does not exist): the fork waits, then its source goes.
    kube.apply(manifests.session("gone-src", "no-such-pool", volumeClaimTemplates=workspace()), namespace=ns)
    kube.apply(manifests.session("gone-fork", forkFrom={"name": "gone-src"}), namespace=ns)
    kube.wait_for("the fork waits", lambda: _phase_reason(kube, ns, "gone-fork") == ("Pending", "SourceNotReady"))
    kube.run("delete", "agentsession", "gone-src", "-n", ns)
    kube.wait_for("SourceNotFound", lambda: _phase_reason(kube, ns, "gone-fork") == ("Failed", "SourceNotFound"))
    message = (kube.condition(_session(kube, ns, "gone-fork"), "Failed") or {}).get("message", "")
    assert "spec.forkFrom.name gone-src" in message and "no AgentSession gone-src" in message
    assert _claims_of(kube, ns, "gone-fork") == []


def test_source_without_volumes_fails_the_fork_with_no_claim(kube: Kube, ns: str) -> None:
    with AgentSessionSandbox("bare-src", ns, warm_pool=POOL, ttl="1h") as source:
        source.wait_ready()
        kube.apply(manifests.session("bare-fork", forkFrom={"name": "bare-src"}), namespace=ns)
        kube.wait_for(
            "SourceWithoutVolumes",
            lambda: _phase_reason(kube, ns, "bare-fork") == ("Failed", "SourceWithoutVolumes"),
        )
        message = (kube.condition(_session(kube, ns, "bare-fork"), "Failed") or {}).get("message", "")
        assert "spec.forkFrom.name bare-src" in message and "no volumes" in message
        assert _claims_of(kube, ns, "bare-fork") == []


def test_storage_class_that_cannot_clone_fails_the_fork_with_no_claim(kube: Kube, ns: str) -> None:
    vct = workspace(NO_CLONE)
    with AgentSessionSandbox("nc-src", ns, warm_pool=POOL, ttl="1h", volume_claim_templates=vct) as source:
        source.wait_ready()
        kube.apply(manifests.session("nc-fork", forkFrom={"name": "nc-src"}), namespace=ns)
        kube.wait_for(
            "VolumeCopyUnsupported",
            lambda: _phase_reason(kube, ns, "nc-fork") == ("Failed", "VolumeCopyUnsupported"),
        )
        message = (kube.condition(_session(kube, ns, "nc-fork"), "Failed") or {}).get("message", "")
        assert f"StorageClass {NO_CLONE}" in message and "agentsession.dev/volume-copy=Clone" in message
        assert _claims_of(kube, ns, "nc-fork") == []
        pvcs = kube.list("pvc", ns)
        assert not any(p["metadata"]["name"].startswith("workspace-nc-fork") for p in pvcs)


def _policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSessionPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def _egress_cidrs(kube: Kube, ns: str, name: str) -> list[str] | None:
    uid = _session(kube, ns, name)["metadata"]["uid"]
    for p in kube.list("networkpolicies", ns):
        if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or []):
            return [
                peer["ipBlock"]["cidr"]
                for rule in p["spec"].get("egress") or []
                for peer in rule.get("to") or []
                if "ipBlock" in peer
            ]
    return None


def test_a_relabelled_fork_is_still_held_by_its_source_policy(kube: Kube, ns: str) -> None:
    """Issue 28 item 7. Attack: fork a session of restricted data under labels an open policy selects (the
    fork's own labels pick its policies), then relabel it and fork the fork: internet egress for the copy,
    and no end to it. After: the source's policy holds for every copy whatever its labels (status.lineage),
    its expiry stays within the source's maxTtl, and a policy denying forks of the source refuses the fork."""
    kube.apply(
        _policy(
            "restricted",
            {
                "selector": {"matchLabels": {"data": "restricted"}},
                "limits": {"maxTtl": "1h"},
                "egress": {"allowCIDRs": ["10.1.0.0/16"]},
            },
        ),
        _policy("internet", {"selector": {"matchLabels": {"tier": "open"}}, "egress": {"allowCIDRs": ["0.0.0.0/0"]}}),
        namespace=ns,
    )
    labels = {"data": "restricted"}
    vct = workspace()
    try:
        with AgentSessionSandbox(
            "esc-src", ns, warm_pool=POOL, ttl="1h", volume_claim_templates=vct, session_labels=labels
        ) as src:
            src.wait_ready()
            created = dt.datetime.fromisoformat(_session(kube, ns, "esc-src")["metadata"]["creationTimestamp"])
            kube.apply(
                manifests.session("esc-fork", None, {"tier": "open"}, forkFrom={"name": "esc-src"}), namespace=ns
            )
            kube.wait_for("the fork Ready", lambda: _phase_reason(kube, ns, "esc-fork")[0] == "Ready", timeout=300)
            assert kube.wait_for("the fork's NetworkPolicy", lambda: _egress_cidrs(kube, ns, "esc-fork")) == [
                "10.1.0.0/16"
            ]
            body = _session(kube, ns, "esc-fork")
            expiry = dt.datetime.fromisoformat(body["status"].get("expiresAt") or "9999-12-31T00:00:00Z")
            assert expiry <= created + dt.timedelta(hours=1), (expiry, created)
            assert [e["name"] for e in body["status"]["lineage"]] == ["esc-src"]

        # The source is gone; the fork is relabelled and forked again under the open policy's labels.
        kube.run("label", "agentsession", "esc-fork", "-n", ns, "tier=open", "again=yes", "--overwrite")
        kube.apply(manifests.session("esc-fork-2", None, {"tier": "open"}, forkFrom={"name": "esc-fork"}), namespace=ns)
        kube.wait_for("the second fork Ready", lambda: _phase_reason(kube, ns, "esc-fork-2")[0] == "Ready", timeout=300)
        second = _session(kube, ns, "esc-fork-2")
        assert {e["name"] for e in second["status"]["lineage"]} >= {"esc-src", "esc-fork"}
        assert kube.wait_for("its NetworkPolicy", lambda: _egress_cidrs(kube, ns, "esc-fork-2")) == ["10.1.0.0/16"]
        assert dt.datetime.fromisoformat(second["status"]["expiresAt"]) <= created + dt.timedelta(hours=1)
        assert _egress_cidrs(kube, ns, "esc-fork") == ["10.1.0.0/16"]  # the relabel opened nothing

        # A policy denying forks of the source's data refuses a fork of the copy, however it is labelled.
        kube.apply(
            _policy("no-copies", {"selector": {"matchLabels": labels}, "limits": {"allowForks": False}}), namespace=ns
        )

        def refused() -> str | None:
            proc = kube.apply(
                manifests.session("esc-fork-3", None, {"tier": "open"}, forkFrom={"name": "esc-fork-2"}),
                namespace=ns,
                check=False,
            )
            if proc.returncode != 0:
                return proc.stderr
            kube.run("delete", "agentsession", "esc-fork-3", "-n", ns, "--wait=true")  # the policy was not seen yet
            return None

        message = kube.wait_for("the webhook to refuse the fork", refused, timeout=30, interval=1)
        assert "allowForks: false" in message and "no-copies" in message, message
    finally:
        kube.run(
            "delete",
            "agentsession",
            "esc-fork",
            "esc-fork-2",
            "esc-fork-3",
            "-n",
            ns,
            "--ignore-not-found",
            check=False,
        )
        kube.run(
            "delete",
            "agentsessionpolicy",
            "restricted",
            "internet",
            "no-copies",
            "-n",
            ns,
            "--ignore-not-found",
            check=False,
        )
