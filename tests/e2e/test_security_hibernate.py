"""Issue 33 end to end, kwok: what a tenant may not do with Hibernate, decided by the real API server.

The restore annotation (``agentsession.dev/restore-from``) makes devcluster's gVisor shim restore a pod from
a checkpoint image of its namespace: only the operator sets it, on a hibernated session's wake. A session
whose spec names it would start its sandbox from another session's memory (secrets included).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentsession_api import names
from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = pytest.mark.e2e


def test_a_session_may_not_set_the_restore_annotation(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    """Attack: spec.podAnnotations naming another session's image. Before: admitted (the claim's
    additionalPodMetadata carried it to the pod). Now the API server refuses it at create and at update."""
    victim = "other-0123456789"
    body = manifests.session("thief", "pool", ttl="5m", podAnnotations={names.ANNOTATION_RESTORE_FROM: victim})
    refused = kube.run("create", "-n", namespace, "-f", "-", input=json.dumps(body), check=False)
    assert refused.returncode != 0, f"admitted: {refused.stdout}"
    assert names.ANNOTATION_RESTORE_FROM in refused.stderr and "set only by the operator" in refused.stderr, (
        refused.stderr
    )
    plain = manifests.session("plain", "pool", ttl="5m", podAnnotations={"example.com/a": "b"})
    kube.run("create", "-n", namespace, "-f", "-", input=json.dumps(plain))
    patch = {"spec": {"podAnnotations": {names.ANNOTATION_RESTORE_FROM: victim}}}
    proc = kube.run(
        "patch", "agentsession", "plain", "-n", namespace, "--type=merge", "-p", json.dumps(patch), check=False
    )
    assert proc.returncode != 0 and "set only by the operator" in proc.stderr, proc.stderr


def _policy(name: str, spec: dict[str, object]) -> dict[str, object]:
    return {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSessionPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_a_policy_forbidding_hibernate_refuses_it_and_suspends_the_others_as_suspend(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """limits.allowHibernate false: a session asking for Hibernate is refused by the operator's webhook, naming
    the policy; one that gets Hibernate from a policy default is admitted and its condition says why it will
    suspend as Suspend (HibernateForbidden)."""
    from tests.e2e.test_policy import refusal, status_of

    kube.apply(
        manifests.template("pause"),
        manifests.warm_pool("pool", "pause", 0),
        _policy("no-memory", {"limits": {"allowHibernate": False, "maxCheckpointSize": "64Mi"}}),
        _policy("defaults", {"defaults": {"idleAction": "Hibernate"}}),
        namespace=namespace,
    )
    asks = manifests.session("asks", "pool", ttl="5m", idleAction="Hibernate")
    error = kube.wait_for(
        "the webhook to refuse Hibernate",
        lambda: refusal(kube, asks, namespace, dry_run=True),
        timeout=60,
        interval=0.5,
    )
    assert "spec.idleAction: Hibernate is not allowed (spec.limits.allowHibernate: false)" in error, error
    assert "(AgentSessionPolicy no-memory)" in error, error
    assert refusal(kube, asks, namespace) is not None
    assert kube.get("agentsession", "asks", namespace) is None

    kube.apply(manifests.session("defaulted", "pool", ttl="5m"), namespace=namespace)

    def forbidden() -> dict[str, object] | None:
        conds = status_of(kube, "defaulted", namespace).get("conditions") or []
        return next(
            (c for c in conds if c.get("type") == "Hibernated" and c.get("reason") == "HibernateForbidden"), None
        )

    cond = kube.wait_for("condition Hibernated HibernateForbidden", forbidden, timeout=45)
    assert cond["status"] == "False" and "AgentSessionPolicy no-memory forbids Hibernate" in str(cond["message"])
    bad = _policy("bad-size", {"limits": {"maxCheckpointSize": "lots"}})
    proc = kube.run("create", "-n", namespace, "-f", "-", input=json.dumps(bad), check=False)
    assert proc.returncode != 0 and "maxCheckpointSize" in proc.stderr, proc.stderr


RESTORE_PINS = Path(__file__).parents[2] / "config" / "admission" / "restore_annotation.yaml"


def test_no_tenant_object_can_carry_the_restore_annotation_to_a_pod(kube: Kube, namespace: str) -> None:
    """Attack: a tenant allowed to write SandboxTemplates, SandboxClaims, Sandboxes and Pods in its namespace
    names another session's image on each (a template's pods, a claim's, a Sandbox's, a bare pod would all
    restore from it). config/admission/restore_annotation.yaml's policies refuse every one; the same pod
    without the annotation is created (the refusal is the policy's, not RBAC's)."""
    kube.run("apply", "-f", str(RESTORE_PINS))
    tenant = f"system:serviceaccount:{namespace}:tenant"
    kube.run("create", "serviceaccount", "tenant", "-n", namespace)
    kube.run(
        "create", "role", "writer", "-n", namespace, "--verb=create,update,patch,get",
        "--resource=sandboxtemplates.extensions.agents.x-k8s.io,sandboxclaims.extensions.agents.x-k8s.io,"
        "sandboxes.agents.x-k8s.io,pods",
    )  # fmt: skip
    kube.run(
        "create", "rolebinding", "writer", "-n", namespace, "--role=writer", f"--serviceaccount={namespace}:tenant"
    )
    restore = {names.ANNOTATION_RESTORE_FROM: "victim-0123456789"}
    template = manifests.template("thief")
    template["spec"]["podTemplate"].setdefault("metadata", {})["annotations"] = restore
    pod_template = {"metadata": {"annotations": restore}, "spec": template["spec"]["podTemplate"]["spec"]}
    claim = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {"name": "thief"},
        "spec": {"warmPoolRef": {"name": "pool"}, "additionalPodMetadata": {"annotations": restore}},
    }
    sandbox = {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": "thief"},
        "spec": {"podTemplate": pod_template},
    }
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "thief", "annotations": restore}}
    pod["spec"] = pod_template["spec"]

    def create(body: dict[str, object], dry_run: bool = False) -> str:
        args = ["create", "-n", namespace, f"--as={tenant}", "-f", "-"] + (["--dry-run=server"] if dry_run else [])
        proc = kube.run(*args, input=json.dumps(body), check=False)
        return proc.stderr if proc.returncode else ""

    # A new policy is enforced once the API server's informer has it: probed without storing anything.
    kube.wait_for("the restore pins to be enforced", lambda: create(template, dry_run=True), timeout=30, interval=0.5)
    for what, body, said in (
        ("template", template, "a SandboxTemplate may not name a checkpoint image"),
        ("claim", claim, "additionalPodMetadata is set only by the agentsession operator"),
        ("sandbox", sandbox, "is set only by the agentsession operator, on a hibernated session's wake"),
        ("pod", pod, "is set only on the pods agent-sandbox's controller creates"),
    ):
        error = create(body)
        assert said in error, f"{what}: {error or 'admitted'}"
    plain = {**pod, "metadata": {"name": "plain"}}
    assert create(plain) == ""


def test_a_tenant_account_named_like_the_controllers_cannot_restore(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Attack: the restore pins trusted any ServiceAccount *named* agent-sandbox-controller (pods) or
    agentsession-operator (Sandboxes), in any namespace. A tenant creates both in its own namespace and names a
    checkpoint with each. Only the real accounts (agent-sandbox's namespace, the operator's) are trusted now:
    both lookalikes are refused, while the operator's own account may put the annotation on a claim (the wake's
    durable path: agent-sandbox's claim controller copies it onto the Sandbox and keeps it there; the shared
    operator fixture installs its account's RBAC)."""
    kube.run("apply", "-f", str(RESTORE_PINS))
    kube.run(
        "create", "role", "writer", "-n", namespace, "--verb=create,update,patch,get",
        "--resource=sandboxtemplates.extensions.agents.x-k8s.io,sandboxclaims.extensions.agents.x-k8s.io,"
        "sandboxes.agents.x-k8s.io,pods",
    )  # fmt: skip
    for account in ("agent-sandbox-controller", "agentsession-operator"):
        kube.run("create", "serviceaccount", account, "-n", namespace)
        binding = f"--serviceaccount={namespace}:{account}"
        kube.run("create", "rolebinding", account, "-n", namespace, "--role=writer", binding)
    restore = {names.ANNOTATION_RESTORE_FROM: "victim-0123456789"}
    spec = manifests.template("thief")["spec"]["podTemplate"]["spec"]
    sandbox = {
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": "thief"},
        "spec": {"podTemplate": {"spec": spec}, "operatingMode": "Suspended"},
    }
    claim = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {"name": "claimed"},
        "spec": {"warmPoolRef": {"name": "pool"}},
    }
    kube.apply(sandbox, claim, namespace=namespace)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "thief", "annotations": restore}, "spec": spec}
    named = json.dumps({"spec": {"podTemplate": {"metadata": {"annotations": restore}}}})
    on_claim = json.dumps({"spec": {"additionalPodMetadata": {"annotations": restore}}})

    def run(user: str, *args: str, body: dict[str, object] | None = None) -> str:
        proc = kube.run(
            *args, "-n", namespace, f"--as={user}", "--dry-run=server",
            input=json.dumps(body) if body is not None else None, check=False,
        )  # fmt: skip
        return proc.stderr if proc.returncode else ""

    lookalike_controller = f"system:serviceaccount:{namespace}:agent-sandbox-controller"
    lookalike_operator = f"system:serviceaccount:{namespace}:agentsession-operator"
    template = manifests.template("thief")
    template["spec"]["podTemplate"]["metadata"] = {"annotations": restore}
    kube.wait_for(  # probed with what every version refuses, so the loop below says what got admitted
        "the restore pins to be enforced",
        lambda: run(lookalike_operator, "create", "-f", "-", body=template),
        timeout=30,
        interval=0.5,
    )
    for user, args, body, said in (
        (lookalike_controller, ("create", "-f", "-"), pod, "is set only on the pods agent-sandbox's controller"),
        (lookalike_operator, ("patch", "sandbox", "thief", "--type=merge", "-p", named), None, "set only by"),
        (lookalike_operator, ("patch", "sandboxclaim", "claimed", "--type=merge", "-p", on_claim), None, "only by"),
    ):
        error = run(user, *args, body=body)
        assert said in error, f"{user} {args[0]}: {error or 'admitted'}"
    operator = "system:serviceaccount:agentsession-system:agentsession-operator"
    assert run(operator, "patch", "sandboxclaim", "claimed", "--type=merge", "-p", on_claim) == ""


def test_a_tenant_cannot_annotate_a_running_pod_to_restore_another_sessions_memory(kube: Kube, namespace: str) -> None:
    """Attack (issue 49 item 1): a tenant with `create, patch` on pods creates a plain pod (admitted: it names
    no checkpoint), then annotates it with the victim's checkpoint name (readable in the victim's
    status.hibernation). The kubelet builds a pod's next sandbox from its current annotations, so when the
    tenant's sandbox dies the shim would restore the victim's processes, env and tokens into it. Before: the
    pins covered Pod CREATE only and the annotate was admitted. Now any add or change of the key on a pod's
    UPDATE is refused, by anyone; an update that leaves the pod's annotations alone, or another key, passes."""
    kube.run("apply", "-f", str(RESTORE_PINS))
    tenant = f"system:serviceaccount:{namespace}:tenant"
    kube.run("create", "serviceaccount", "tenant", "-n", namespace)
    kube.run("create", "role", "pods", "-n", namespace, "--verb=create,update,patch,get", "--resource=pods")
    kube.run("create", "rolebinding", "pods", "-n", namespace, "--role=pods", f"--serviceaccount={namespace}:tenant")
    spec = manifests.template("thief")["spec"]["podTemplate"]["spec"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "thief"}, "spec": spec}
    kube.run("create", "-n", namespace, f"--as={tenant}", "-f", "-", input=json.dumps(pod))
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "annotations": {}}, "spec": spec}
    probe["metadata"]["annotations"] = {names.ANNOTATION_RESTORE_FROM: "victim-0123456789"}  # type: ignore[index]

    def refused_create() -> str:
        args = ["create", "-n", namespace, f"--as={tenant}", "--dry-run=server", "-f", "-"]
        proc = kube.run(*args, input=json.dumps(probe), check=False)
        return proc.stderr if proc.returncode else ""

    kube.wait_for("the restore pins to be enforced", refused_create, timeout=30, interval=0.5)

    def annotate(*args: str) -> str:
        proc = kube.run("annotate", "pod", "thief", "-n", namespace, f"--as={tenant}", *args, check=False)
        return proc.stderr if proc.returncode else ""

    added = annotate(f"{names.ANNOTATION_RESTORE_FROM}=victim-0123456789")
    assert "is never added to or changed on an existing pod" in added, f"admitted: {added!r}"
    pod_now = kube.get("pod", "thief", namespace) or {}
    assert names.ANNOTATION_RESTORE_FROM not in (pod_now["metadata"].get("annotations") or {}), pod_now["metadata"]
    as_admin = kube.run(
        "annotate", "pod", "thief", "-n", namespace, f"{names.ANNOTATION_RESTORE_FROM}=victim-0123456789", check=False
    )
    assert as_admin.returncode != 0, "an admin's annotate was admitted: the pin holds for everyone on UPDATE"
    assert annotate("example.com/note=fine") == ""  # any other key passes
