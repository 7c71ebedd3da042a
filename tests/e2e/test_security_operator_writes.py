"""Issue 28 item 10: what the operator's RBAC lets it write, pinned by config/admission/ (after a compromise).

Each attack runs with the operator's own ServiceAccount token (the `operator` fixture's kubeconfig, the
RBAC and pins `kubectl apply -k config/` installs) against the real kube-apiserver. Before: every one
of them was admitted (RBAC grants `patch` on any Sandbox and on the webhook configuration, `create` and
`update` on any NetworkPolicy). Now the API server's ValidatingAdmissionPolicies refuse them, while the
operator's own writes (suspend through operatingMode, its caBundle and URL, each session's policy) go on.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from testkit import manifests
from tests.e2e import install
from tests.e2e.conftest import Kube, OperatorProcess
from tests.e2e.test_policy import status_of

pytestmark = pytest.mark.e2e

PINS = install.CONFIG / "admission" / "operator_write_pins.yaml"
CLAIM_CONFORMITY = install.CONFIG / "components" / "claim-conformity" / "claim_conformity.yaml"


def _ready_session(kube: Kube, namespace: str, name: str = "pinned") -> dict[str, Any]:
    kube.apply(manifests.template("pause"), manifests.warm_pool("pool", "pause", 0), namespace=namespace)
    kube.apply(manifests.session(name, "pool"), namespace=namespace)
    kube.wait_for(f"{name} Ready", lambda: status_of(kube, name, namespace).get("phase") == "Ready", timeout=90)
    return status_of(kube, name, namespace)


def _as_operator(kube: Kube, operator: OperatorProcess, *args: str, input: str | None = None) -> Any:
    return kube.run(*args, kubeconfig=operator.kubeconfig, check=False, input=input)


def _refused(proc: Any, message: str) -> None:
    assert proc.returncode != 0, f"admitted: {proc.stdout}"
    assert message in proc.stderr, proc.stderr


def test_the_operator_may_change_only_a_sandboxs_operating_mode(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Attack: a hostNetwork pod template, a label that a foreign NetworkPolicy selects. Then the operator's
    own write: spec.suspend on the session makes it set operatingMode, under the same pin."""
    status = _ready_session(kube, namespace)
    sandbox = status["sandboxName"]
    rewrite = {"spec": {"podTemplate": {"spec": {"hostNetwork": True}}}}
    proc = _as_operator(
        kube, operator, "patch", "sandbox", sandbox, "-n", namespace, "--type=merge", "-p", json.dumps(rewrite)
    )
    _refused(proc, "may change only spec.operatingMode of a Sandbox")
    relabel = {"metadata": {"labels": {"example.com/open": "yes"}}}
    proc = _as_operator(
        kube, operator, "patch", "sandbox", sandbox, "-n", namespace, "--type=merge", "-p", json.dumps(relabel)
    )
    _refused(proc, "may not change a Sandbox's labels")
    kept = kube.get("sandbox", sandbox, namespace) or {}
    assert not kept["spec"]["podTemplate"]["spec"].get("hostNetwork")
    _the_wake_annotation_only(kube, operator, namespace, sandbox)

    kube.run("patch", "agentsession", "pinned", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    kube.wait_for(
        "the operator to suspend it",
        lambda: status_of(kube, "pinned", namespace).get("phase") == "Suspended",
        timeout=60,
    )
    assert (kube.get("sandbox", sandbox, namespace) or {})["spec"].get("operatingMode") == "Suspended"


def _patch_template(kube: Kube, operator: OperatorProcess, namespace: str, sandbox: str, meta: dict[str, Any]) -> Any:
    patch = json.dumps({"spec": {"podTemplate": {"metadata": meta}}})
    return _as_operator(
        kube, operator, "patch", "sandbox", sandbox, "-n", namespace, "--type=merge", "-p", patch, "-o", "json"
    )


def _the_wake_annotation_only(kube: Kube, operator: OperatorProcess, namespace: str, sandbox: str) -> None:
    """Issue 33: the wake of a hibernated session sets the pod template's restore-from annotation and later
    removes it (decisions/hibernate.wake_patch, clear_restore_patch): admitted. Any other annotation, a label,
    or another annotation changed beside it: refused."""
    restore = "agentsession.dev/restore-from"
    proc = _patch_template(kube, operator, namespace, sandbox, {"annotations": {restore: "pinned-0123abcd"}})
    assert proc.returncode == 0, proc.stderr
    # Admitted and written (agent-sandbox's claim controller then sets the template's metadata back to the
    # SandboxTemplate's and the claim's: what the wake's pod got is its own).
    assert json.loads(proc.stdout)["spec"]["podTemplate"]["metadata"]["annotations"][restore] == "pinned-0123abcd"
    for meta in (
        {"annotations": {"example.com/other": "x"}},
        {"annotations": {restore: "pinned-fedc", "example.com/other": "x"}},
        {"labels": {"example.com/open": "yes"}},
    ):
        _refused(_patch_template(kube, operator, namespace, sandbox, meta), "may change only spec.operatingMode")
    proc = _patch_template(kube, operator, namespace, sandbox, {"annotations": {restore: None}})
    assert proc.returncode == 0, proc.stderr
    after = (kube.get("sandbox", sandbox, namespace) or {})["spec"]["podTemplate"]
    assert restore not in ((after.get("metadata") or {}).get("annotations") or {})
    assert "example.com/other" not in ((after.get("metadata") or {}).get("annotations") or {})
    assert not ((after.get("metadata") or {}).get("labels") or {}).get("example.com/open")


def test_the_operator_may_not_widen_its_webhook(kube: Kube, operator: OperatorProcess) -> None:
    """Attack: add Secrets to the webhook's rules (every Secret written in the cluster would be sent to it), and
    point it elsewhere. The operator's own patch (its URL and caBundle, at every start) was admitted: the
    fixture's operator is serving."""
    name = "agentsession.dev"
    hooks = (kube.get("validatingwebhookconfiguration", name) or {})["webhooks"]
    assert hooks[0]["clientConfig"].get("caBundle"), "the operator patched its caBundle in under the pin"
    secrets = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"], "operations": ["CREATE", "UPDATE"]}
    widened = [{"name": hooks[0]["name"], "rules": [*hooks[0]["rules"], secrets]}]
    patch = json.dumps({"webhooks": widened})
    proc = _as_operator(
        kube, operator, "patch", "validatingwebhookconfiguration", name, "--type=strategic", "-p", patch
    )
    _refused(proc, "may change only the clientConfig")
    elsewhere = [
        {"name": hooks[0]["name"], "clientConfig": {"url": None, "service": {"namespace": "kube-system", "name": "x"}}}
    ]
    proc = _as_operator(
        kube,
        operator,
        "patch",
        "validatingwebhookconfiguration",
        name,
        "--type=strategic",
        "-p",
        json.dumps({"webhooks": elsewhere}),
    )
    _refused(proc, "may not point its webhook at another Service")
    after = (kube.get("validatingwebhookconfiguration", name) or {})["webhooks"]
    assert after[0]["rules"] == hooks[0]["rules"] and after[0]["clientConfig"] == hooks[0]["clientConfig"]


def test_the_operator_may_write_only_a_sessions_own_network_policy(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Attack: an allow-everything policy for the whole namespace (owned by a session, to look like one of
    ours), and a rewrite of the tenant's own policy. The operator's own policy for the session stays."""
    status = _ready_session(kube, namespace, "netpinned")
    session = kube.get("agentsession", "netpinned", namespace) or {}
    owner = {
        "apiVersion": session["apiVersion"],
        "kind": "AgentSession",
        "name": "netpinned",
        "uid": session["metadata"]["uid"],
    }
    open_all = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "open-all", "namespace": namespace, "ownerReferences": [owner]},
        "spec": {"podSelector": {}, "ingress": [{}], "egress": [{}], "policyTypes": ["Ingress", "Egress"]},
    }
    proc = _as_operator(kube, operator, "create", "-f", "-", input=json.dumps(open_all))
    _refused(proc, "select exactly one claim's pods")
    tenants = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "tenant-own", "namespace": namespace},
        "spec": {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"]},
    }
    kube.apply(tenants)
    widened = kube.get("networkpolicy", "tenant-own", namespace) or {}
    widened["spec"]["ingress"] = [{}]  # an update (the verb RBAC grants the operator), not a patch
    proc = _as_operator(kube, operator, "replace", "-f", "-", input=json.dumps(widened))
    _refused(proc, "only NetworkPolicies owned by an AgentSession")
    assert not (kube.get("networkpolicy", "tenant-own", namespace) or {})["spec"].get("ingress")
    own = kube.list("networkpolicy", namespace, selector=f"agentsession.dev/session-uid={session['metadata']['uid']}")
    claim_uid = (kube.get("sandboxclaim", status["claimName"], namespace) or {})["metadata"]["uid"]
    assert [p["spec"]["podSelector"] for p in own] == [{"matchLabels": {"agents.x-k8s.io/claim-uid": claim_uid}}]


def test_the_sandbox_pin_names_every_field_of_the_installed_sandbox_spec(kube: Kube) -> None:
    """The pin lists the Sandbox spec's fields (a CRD's object type cannot be iterated in CEL): a field a
    newer agent-sandbox adds must fail here, not escape the pin."""
    policy = next(
        doc for doc in yaml.safe_load_all(PINS.read_text()) if doc["metadata"]["name"].endswith("sandbox-writes")
    )
    pinned = set(re.findall(r"object\.spec\.\?(\w+)", policy["spec"]["validations"][0]["expression"]))
    crd = kube.get("crd", "sandboxes.agents.x-k8s.io") or {}
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        assert pinned == set(spec) - {"operatingMode"}, version["name"]
        # The pod template is pinned by its spec, its metadata's labels and annotations: nothing else there.
        template = spec["podTemplate"]["properties"]
        assert set(template) == {"metadata", "spec"}, version["name"]
        assert set(template["metadata"]["properties"]) == {"labels", "annotations"}, version["name"]


def test_the_operator_may_not_open_a_claims_pod_to_everyone(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Attack (issue 51 item 3): with the operator's token, a NetworkPolicy owned by a session and selecting
    one claim's pods (what the pin checked) but with the rules widened: `ingress: [{}]` (every source, every
    port), a peer selecting every pod of every namespace, an ipBlock of the whole internet, egress `to`
    anything. Before: admitted. Now the rules must have the builder's shape (decisions/network.py): one
    ingress rule without ports from this namespace's labelled clients, a router namespace's pods, or client
    CIDRs narrower than /8; egress to ipBlocks and the cluster DNS only."""
    status = _ready_session(kube, namespace, "rulepinned")
    session = kube.get("agentsession", "rulepinned", namespace) or {}
    owner = {"apiVersion": session["apiVersion"], "kind": "AgentSession", "name": "rulepinned"}
    owner["uid"] = session["metadata"]["uid"]
    claim_uid = (kube.get("sandboxclaim", status["claimName"], namespace) or {})["metadata"]["uid"]
    selector = {"matchLabels": {"agents.x-k8s.io/claim-uid": claim_uid}}

    def policy(name: str, spec: dict[str, Any]) -> str:
        meta = {"name": name, "namespace": namespace, "ownerReferences": [owner]}
        body = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta}
        body["spec"] = {"podSelector": selector, "policyTypes": ["Ingress", "Egress"], **spec}
        return json.dumps(body)

    clients = {"podSelector": {"matchLabels": {"agentsession.dev/sandbox-client": "true"}}}
    for name, spec in (
        ("open-ingress", {"ingress": [{}]}),
        ("any-pod-anywhere", {"ingress": [{"from": [{"namespaceSelector": {}, "podSelector": {}}]}]}),
        ("whole-internet", {"ingress": [{"from": [clients, {"ipBlock": {"cidr": "0.0.0.0/0"}}]}]}),
        ("open-egress", {"ingress": [{"from": [clients]}], "egress": [{}]}),
        ("egress-any-pod", {"ingress": [{"from": [clients]}], "egress": [{"to": [{"podSelector": {}}]}]}),
    ):
        proc = _as_operator(kube, operator, "create", "-f", "-", input=policy(name, spec))
        _refused(proc, "rules have the shape the operator builds")
    shaped = {
        "ingress": [{"from": [clients, {"ipBlock": {"cidr": "198.19.255.2/32"}}]}],
        "egress": [{"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}], "ports": [{"protocol": "TCP", "port": 443}]}],
    }
    proc = _as_operator(kube, operator, "create", "--dry-run=server", "-f", "-", input=policy("shaped", shaped))
    assert proc.returncode == 0, proc.stderr


def test_the_operator_may_delete_only_finished_sessions(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    """Issue 51 item 3: the operator deletes a session only for cleanup.deleteFinishedAfter, once it is
    Expired or Failed. Attack, with its token: delete a Ready session (a tenant's running sandbox and its
    volumes go with it). Then its own write: a finished session is deleted by the policy's retention."""
    _ready_session(kube, namespace, "running")
    proc = _as_operator(kube, operator, "delete", "agentsession", "running", "-n", namespace, "--wait=false")
    _refused(proc, "may delete only finished AgentSessions")
    assert kube.get("agentsession", "running", namespace) is not None
    kube.apply(
        {
            "apiVersion": "agentsession.dev/v1alpha1",
            "kind": "AgentSessionPolicy",
            "metadata": {"name": "retention"},
            "spec": {"selector": {"matchLabels": {"retire": "yes"}}, "cleanup": {"deleteFinishedAfter": "1s"}},
        },
        namespace=namespace,
    )
    kube.apply(manifests.session("brief", "pool", meta_labels={"retire": "yes"}, ttl="2s"), namespace=namespace)
    kube.wait_for(
        "the expired session deleted by its retention",
        lambda: kube.get("agentsession", "brief", namespace) is None,
        timeout=90,
    )


def test_the_operator_may_change_only_a_claims_shutdown_time(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Issue 51 item 3: the operator patches a claim's lifecycle.shutdownTime (the TTL) and the restore
    annotation of a hibernated session's wake, nothing else. Attack, with its token: an env var the pod
    starts with (LD_PRELOAD), another warm pool (template), pod labels a foreign NetworkPolicy selects, the
    claim's own labels. Then its own write: a longer TTL moves the shutdown time, under the same pin."""
    claim = _ready_session(kube, namespace, "claimed")["claimName"]
    for patch, refusal in (
        ({"spec": {"env": [{"name": "LD_PRELOAD", "value": "/tmp/x.so"}]}}, "may change only spec.lifecycle"),
        ({"spec": {"warmPoolRef": {"name": "another"}}}, "may change only spec.lifecycle"),
        ({"spec": {"additionalPodMetadata": {"labels": {"sandbox.users.io/open": "yes"}}}}, "spec.lifecycle"),
        ({"metadata": {"labels": {"example.com/open": "yes"}}}, "may not change a SandboxClaim's labels"),
    ):
        proc = _as_operator(
            kube, operator, "patch", "sandboxclaim", claim, "-n", namespace, "--type=merge", "-p", json.dumps(patch)
        )
        _refused(proc, refusal)
    kept = kube.get("sandboxclaim", claim, namespace) or {}
    assert not kept["spec"].get("env") and kept["spec"]["warmPoolRef"] == {"name": "pool"}, kept["spec"]
    before = kept["spec"]["lifecycle"].get("shutdownTime")
    kube.run("patch", "agentsession", "claimed", "-n", namespace, "--type=merge", "-p", '{"spec":{"ttl":"3h"}}')
    kube.wait_for(
        "the operator to move the claim's shutdown time",
        lambda: (
            ((kube.get("sandboxclaim", claim, namespace) or {}).get("spec") or {})
            .get("lifecycle", {})
            .get("shutdownTime")
            not in (None, before)
        ),
        timeout=60,
    )


def test_the_claim_pin_names_every_field_of_the_installed_claim_spec(kube: Kube) -> None:
    """As the Sandbox pin: every field of the installed SandboxClaim spec is in the pin's list, or is one
    the operator may change (lifecycle.shutdownTime, the restore annotation); a new one fails here."""
    policy = next(
        doc for doc in yaml.safe_load_all(PINS.read_text()) if doc["metadata"]["name"].endswith("claim-writes")
    )
    expression = policy["spec"]["validations"][0]["expression"]
    crd = kube.get("crd", "sandboxclaims.extensions.agents.x-k8s.io") or {}
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        assert set(re.findall(r"object\.spec\.\?(\w+)", expression)) == set(spec), version["name"]
        lifecycle = set(re.findall(r"object\.spec\.\?lifecycle\.\?(\w+)", expression))
        assert lifecycle | {"shutdownTime"} == set(spec["lifecycle"]["properties"]), version["name"]
        assert set(spec["additionalPodMetadata"]["properties"]) == {"labels", "annotations"}, version["name"]


def _claim(name: str, owner: dict[str, str] | None, **spec: Any) -> str:
    """A SandboxClaim as the operator's token could write it (apiVersion of agent-sandbox v1.0)."""
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": "agentsession-operator"}}
    if owner is not None:
        meta["labels"]["agentsession.dev/session-uid"] = owner["uid"]
        meta["ownerReferences"] = [
            {"apiVersion": "agentsession.dev/v1alpha1", "kind": "AgentSession", "controller": True, **owner}
        ]
    body = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": meta,
        "spec": {"lifecycle": {"shutdownPolicy": "Retain"}, **spec},
    }
    return yaml.safe_dump(body)


def test_the_operator_may_create_only_the_claim_its_session_describes(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Issue 51 item 3: a claim's creation was not pinned. Attack, with the operator's token (server-side
    dry runs, so nothing is left behind when admitted): for a tenant's session, a claim with an env var
    the session does not have (LD_PRELOAD), another warm pool (another template), the client label that
    opens every sandbox of the namespace to its pod, a second claim under another name; a claim owned by
    no session, or by one that does not exist, with that label. Then its own write: the session's claim."""
    kube.apply(manifests.template("pause"), manifests.warm_pool("other", "pause", 0), namespace=namespace)
    # The opt-in pin (components/claim-conformity) for this test; config/ alone installs the other one.
    kube.run("apply", "-f", str(CLAIM_CONFORMITY))
    try:
        _claims_for_a_session(kube, namespace, operator)
    finally:
        kube.run("delete", "-f", str(CLAIM_CONFORMITY), "--ignore-not-found")


def _claims_for_a_session(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    # Its pool does not exist yet: the operator creates no claim until it does.
    kube.apply(manifests.session("owner", "later", podLabels={"sandbox.users.io/team": "a"}), namespace=namespace)
    session = kube.get("agentsession", "owner", namespace) or {}
    owner = {"name": "owner", "uid": session["metadata"]["uid"]}
    ghost = {"name": "ghost", "uid": "00000000-0000-4000-8000-000000000000"}
    client: dict[str, Any] = {"additionalPodMetadata": {"labels": {"agentsession.dev/sandbox-client": "true"}}}
    pool: dict[str, Any] = {"warmPoolRef": {"name": "later"}}
    attacks: list[tuple[str, dict[str, str] | None, dict[str, Any], str]] = [
        # An env var the session does not have (a proxy that sees its traffic; a loader hook is refused by
        # the claim-creation pin already, below). First: the wait below probes the conformity pin with it.
        ("owner", owner, {**pool, "env": [{"name": "HTTPS_PROXY", "value": "http://x.example"}]}, "its session's"),
        ("owner", owner, {"warmPoolRef": {"name": "other"}}, "carries its session's"),
        (
            "owner",
            owner,
            {**pool, "additionalPodMetadata": {"labels": {"sandbox.users.io/team": "b"}}},
            "its session's",
        ),
        ("owner", owner, {**pool, **client}, "may not give its pods labels in the agentsession.dev"),
        ("second", owner, pool, "named after it"),
        ("ghost", ghost, {**pool, **client}, "may not give its pods labels in the agentsession.dev"),
        # A session that does not exist judges nothing (the conformity pin has no parameter to compare with):
        # a loader hook is refused whatever the session, as in any session's spec.env.
        ("ghost", ghost, {**pool, "env": [{"name": "LD_PRELOAD", "value": "/tmp/x.so"}]}, "loader or interpreter"),
        ("orphan", None, pool, "only for the one AgentSession that owns it"),
    ]

    def attempt(name: str, by: dict[str, str] | None, spec: dict[str, Any]) -> Any:
        claim = _claim(name, by, **spec)
        return _as_operator(kube, operator, "create", "--dry-run=server", "-n", namespace, "-f", "-", input=claim)

    # The API server acts on a policy applied a moment ago once its admission plugin has loaded it.
    kube.wait_for("the conformity pin in force", lambda: attempt(*attacks[0][:3]).returncode != 0, timeout=30)
    for name, by, spec, refusal in attacks:
        _refused(attempt(name, by, spec), refusal)
    kube.apply(manifests.warm_pool("later", "pause", 0), namespace=namespace)
    kube.wait_for("owner Ready", lambda: status_of(kube, "owner", namespace).get("phase") == "Ready", timeout=90)
