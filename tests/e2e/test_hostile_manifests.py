"""Hostile input (issue 12): malformed and hostile AgentSession and AgentSessionPolicy manifests against the
real kube-apiserver with the operator's webhook. Each is refused with a message naming the field (the
CRD schema and CEL rules, or the webhook), or, where admission cannot see the problem, the object says so
in its status. Afterwards the operator is healthy and a normal session still reaches Ready.

`pytest -m hostile` runs this suite alone; it is also part of the normal e2e run."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from agentsession_api.types import MAX_SESSION_LABELS
from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess
from tests.e2e.test_policy import REFUSED, wait_enforced

pytestmark = [pytest.mark.e2e, pytest.mark.hostile]

TEAM_A = {"team": "a"}
CATASTROPHIC = "([a-z0-9]+-?)+"
ALMOST = "a" * 61 + "_a"  # a 63-character label value that almost matches CATASTROPHIC

POLICY_SPEC: dict[str, Any] = {
    "limits": {
        "maxTtl": "1h",
        "maxIdleTimeout": "30m",
        "allowedWarmPools": ["pool"],
        "env": {"deny": ["AWS_*"]},
        "podAnnotations": {"deny": ["sidecar.istio.io/*"]},
        "allowedStorageClasses": ["standard"],
    },
    "labels": {"required": ["team"], "values": {"team": "^(a|b)$", "app": CATASTROPHIC}},
}


def session(name: str = "hostile", meta_labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return manifests.session(name, "pool", TEAM_A if meta_labels is None else meta_labels, **spec)


def with_spec(**fields: Any) -> dict[str, Any]:
    """A session whose spec fields are set as given (wrong types included), warmPoolRef kept."""
    body = session()
    body["spec"].update(fields)
    return body


def vct(name: str = "w", storage: str = "1Gi", storage_class: str | None = "standard") -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": name}, "spec": spec}


def many_labels(count: int) -> dict[str, str]:
    return {f"k{i}": "v" for i in range(count)}


def env(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"name": n, "value": v} for n, v in pairs]


def named(name: str) -> dict[str, Any]:
    body = session()
    body["metadata"]["name"] = name
    return body


def wrong(path: list[str], value: Any) -> dict[str, Any]:
    """A session with the value at `path` (under the whole object) replaced."""
    body = session()
    target = body
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value
    return body


# (id, manifest, words the refusal must carry: the field, and for the webhook the rule)
SESSIONS: list[tuple[str, dict[str, Any], list[str]]] = [
    ("ttl-int", with_spec(ttl=7200), ["spec.ttl"]),
    ("ttl-absurd", with_spec(ttl="99999999999999999999h"), ["spec.ttl"]),
    ("ttl-negative", with_spec(ttl="-1h"), ["spec.ttl"]),
    ("ttl-zero", with_spec(ttl="0s"), ["spec.ttl"]),
    ("ttl-10k-chars", with_spec(ttl="1" * 10_000 + "h"), ["spec.ttl"]),
    ("ttl-nul", with_spec(ttl="1h\x00"), ["spec.ttl"]),
    ("ttl-days", with_spec(ttl="1d"), ["spec.ttl"]),
    ("ttl-over-policy-max", with_spec(ttl="2h"), ["spec.ttl 2h exceeds the policy maximum 1h"]),
    ("idle-over-policy-max", with_spec(idleTimeout="5h"), ["spec.idleTimeout 5h exceeds the policy maximum 30m"]),
    ("idle-float", with_spec(idleTimeout=1.5), ["spec.idleTimeout"]),
    ("idle-action-lowercase", with_spec(idleAction="delete"), ["spec.idleAction"]),
    ("suspend-string", with_spec(suspend="true"), ["spec.suspend"]),
    ("spec-list", wrong(["spec"], ["ttl", "1h"]), ["spec"]),
    ("pool-ref-string", with_spec(warmPoolRef="pool"), ["spec.warmPoolRef"]),
    ("pool-name-300", with_spec(warmPoolRef={"name": "p" * 300}), ["spec.warmPoolRef.name"]),
    ("pool-name-traversal", with_spec(warmPoolRef={"name": "../pool"}), ["spec.warmPoolRef.name"]),
    ("pool-not-allowed", with_spec(warmPoolRef={"name": "other"}), ["spec.warmPoolRef.name other"]),
    ("env-65", with_spec(env=env(*((f"V{i}", "x") for i in range(65)))), ["spec.env"]),
    ("env-duplicate", with_spec(env=env(("A", "1"), ("A", "2"))), ["spec.env"]),
    ("env-name-nul", with_spec(env=env(("A\x00B", "1"))), ["spec.env"]),
    ("env-name-shell", with_spec(env=env(("$(id)", "1"))), ["spec.env"]),
    ("env-value-1mib", with_spec(env=env(("BIG", "x" * (1024 * 1024)))), ["spec.env"]),
    ("env-ld-preload", with_spec(env=env(("LD_PRELOAD", "/tmp/x.so"))), ["spec.env LD_PRELOAD is denied"]),
    ("env-policy-deny", with_spec(env=env(("AWS_SECRET_ACCESS_KEY", "x"))), ["spec.env AWS_SECRET_ACCESS_KEY"]),
    ("labels-10000", with_spec(labels=many_labels(10_000)), ["spec.labels"]),
    ("labels-reserved", with_spec(labels={"agents.x-k8s.io/claim": "x"}), ["spec.labels"]),
    ("labels-reserved-subdomain", with_spec(labels={"extensions.agents.x-k8s.io/x": "v"}), ["spec.labels"]),
    ("labels-operator-domain", with_spec(labels={"agentsession.dev/session": "x"}), ["spec.labels"]),
    ("labels-key-invalid", with_spec(labels={"bad key!": "x"}), ["spec.labels"]),
    ("labels-value-nul", with_spec(labels={"team": "a\x00b"}), ["spec.labels"]),
    ("labels-value-object", with_spec(labels={"team": {"nested": "x"}}), ["spec.labels"]),
    ("pod-labels-no-domain", with_spec(podLabels={"team": "a"}), ["spec.podLabels"]),
    ("pod-labels-10000", with_spec(podLabels=many_labels(10_000)), ["spec.podLabels"]),
    ("pod-annotation-k8s-domain", with_spec(podAnnotations={"kubernetes.io/psp": "x"}), ["spec.podAnnotations"]),
    ("pod-annotation-5000", with_spec(podAnnotations={"note": "x" * 5000}), ["spec.podAnnotations"]),
    (
        "pod-annotation-mesh-opt-out",
        with_spec(podAnnotations={"sidecar.istio.io/inject": "false"}),
        ["spec.podAnnotations key sidecar.istio.io/inject"],
    ),
    ("vct-9", with_spec(volumeClaimTemplates=[vct(f"w{i}") for i in range(9)]), ["spec.volumeClaimTemplates"]),
    ("vct-duplicate", with_spec(volumeClaimTemplates=[vct("w"), vct("w")]), ["spec.volumeClaimTemplates"]),
    ("vct-storage-words", with_spec(volumeClaimTemplates=[vct(storage="a lot")]), ["storage"]),
    ("vct-storage-negative", with_spec(volumeClaimTemplates=[vct(storage="-1Gi")]), ["storage"]),
    ("vct-storage-class", with_spec(volumeClaimTemplates=[vct(storage_class="fast")]), ["fast"]),
    ("vct-name-traversal", with_spec(volumeClaimTemplates=[vct(name="../w")]), ["spec.volumeClaimTemplates"]),
    ("unknown-field", with_spec(tll="2h"), ['unknown field "spec.tll"']),
    ("unknown-nested-field", with_spec(env=[{"name": "A", "valueFrom": {"secretKeyRef": {}}}]), ["valueFrom"]),
    ("name-254", named("a" * 254), ["metadata.name"]),
    ("name-uppercase", named("Bad_Name"), ["metadata.name"]),
    ("name-nul", named("a\x00b"), ["metadata.name"]),
    ("label-required-missing", session(meta_labels={}), ["metadata.labels is missing the required label team"]),
    ("label-value-pattern", session(meta_labels={"team": "c"}), ["metadata.labels team=c does not match"]),
    (
        "label-catastrophic-regex",
        session(meta_labels={"team": "a", "app": ALMOST}),
        [f"metadata.labels app={ALMOST} does not match"],
    ),
]


def policy(name: str, spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSessionPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


POLICIES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("defaults-ttl-words", policy("p", {"defaults": {"ttl": "forever"}}), ["spec.defaults.ttl"]),
    ("max-ttl-negative", policy("p", {"limits": {"maxTtl": "-5m"}}), ["spec.limits.maxTtl"]),
    ("env-deny-space", policy("p", {"limits": {"env": {"deny": ["AWS *"]}}}), ["spec.limits.env.deny"]),
    ("env-deny-nul", policy("p", {"limits": {"env": {"deny": ["A\x00"]}}}), ["spec.limits.env.deny"]),
    ("values-key-invalid", policy("p", {"labels": {"values": {"bad key!": "x"}}}), ["spec.labels.values"]),
    ("values-regex-2000", policy("p", {"labels": {"values": {"team": "a" * 2000}}}), ["spec.labels.values"]),
    (
        "max-sessions-zero",
        policy("p", {"cleanup": {"maxSessionsPerLabel": {"key": "team", "max": 0}}}),
        ["spec.cleanup.maxSessionsPerLabel.max"],
    ),
    (
        "max-sessions-huge",
        policy("p", {"cleanup": {"maxSessionsPerLabel": {"key": "team", "max": 10**12}}}),
        ["spec.cleanup.maxSessionsPerLabel.max"],
    ),
    (
        "selector-operator",
        policy("p", {"selector": {"matchExpressions": [{"key": "team", "operator": "Like"}]}}),
        ["operator"],
    ),
    (
        "allowed-pools-65",
        policy("p", {"limits": {"allowedWarmPools": [f"p{i}" for i in range(65)]}}),
        ["spec.limits.allowedWarmPools"],
    ),
    ("max-storage-words", policy("p", {"limits": {"maxStorage": "a lot"}}), ["spec.limits.maxStorage"]),
    ("required-33", policy("p", {"labels": {"required": [f"k{i}" for i in range(33)]}}), ["spec.labels.required"]),
    ("unknown-field", policy("p", {"limit": {"maxTtl": "1h"}}), ['unknown field "spec.limit"']),
    ("spec-string", policy("p", "everything"), ["spec"]),
    ("name-254", {**policy("p", {}), "metadata": {"name": "p" * 254}}, ["metadata.name"]),
]

# Policies admission cannot judge (a pattern is only a string to the schema): stored, and their status says
# why they are not in force.
INVALID_PATTERNS: list[tuple[str, str]] = [
    ("regex-unbalanced", "(a|b"),
    ("regex-backreference", "(a)\\1"),
    ("regex-lookahead", "(?=a)a"),
]


def create(kube: Kube, body: dict[str, Any], namespace: str) -> str | None:
    """The API server's error for `body` (strict field validation, sent as JSON so NUL bytes stay NUL),
    None when it stores it."""
    proc = kube.run("create", "--validate=strict", "-n", namespace, "-f", "-", input=json.dumps(body), check=False)
    return proc.stderr if proc.returncode != 0 else None


@pytest.fixture(scope="module")
def policed(kube: Kube, operator: OperatorProcess) -> Iterator[str]:
    name = f"hostile-{uuid.uuid4().hex[:6]}"
    kube.run("create", "namespace", name)
    kube.apply(
        manifests.template("pause"),
        manifests.warm_pool("pool", "pause", 0),
        manifests.warm_pool("other", "pause", 0),
        policy("rules", POLICY_SPEC),
        namespace=name,
    )
    wait_enforced(kube, name)
    yield name
    kube.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.mark.parametrize(("case", "body", "words"), SESSIONS, ids=[c[0] for c in SESSIONS])
def test_hostile_session_is_refused_naming_the_field(
    kube: Kube, policed: str, case: str, body: dict[str, Any], words: list[str]
) -> None:
    started = time.monotonic()
    error = create(kube, body, policed)
    took = time.monotonic() - started
    assert error is not None, f"{case}: admitted"
    for word in words:
        assert word in error, f"{case}: {word!r} not in {error[:2000]}"
    assert took < 10, f"{case}: the refusal took {took:.1f} s"
    stored = [s["metadata"]["name"] for s in kube.list("agentsession", policed)]
    assert body["metadata"]["name"] not in stored, f"{case}: stored"


@pytest.mark.parametrize(("case", "body", "words"), POLICIES, ids=[c[0] for c in POLICIES])
def test_hostile_policy_is_refused_naming_the_field(
    kube: Kube, namespace: str, case: str, body: dict[str, Any], words: list[str]
) -> None:
    error = create(kube, body, namespace)
    assert error is not None, f"{case}: admitted"
    for word in words:
        assert word in error, f"{case}: {word!r} not in {error[:2000]}"


def _valid(kube: Kube, name: str, namespace: str) -> dict[str, Any] | None:
    obj = kube.get("agentsessionpolicy", name, namespace) or {}
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Valid":
            return dict(cond)
    return None


@pytest.mark.parametrize(("case", "pattern"), INVALID_PATTERNS, ids=[c[0] for c in INVALID_PATTERNS])
def test_policy_pattern_admission_cannot_judge_shows_valid_false(
    kube: Kube, namespace: str, operator: OperatorProcess, case: str, pattern: str
) -> None:
    error = create(kube, policy("bad", {"labels": {"values": {"team": pattern}}}), namespace)
    if error is not None:  # refused outright is as good, as long as it names the field
        assert "spec.labels.values" in error, error
        return
    cond = kube.wait_for(
        f"{case}: Valid=False", lambda: (c := _valid(kube, "bad", namespace)) and c["status"] == "False" and c, 30
    )
    assert "not a valid regular expression" in cond["message"] and "team" in cond["message"], cond


def test_ten_thousand_metadata_labels_are_refused_and_the_bound_works(kube: Kube, policed: str) -> None:
    """Kubernetes bounds metadata.labels only by object size, and every replica of the operator keeps a
    session's labels in memory (policies select on them): issue 49 item 2 bounds them at 64. 10,000 are
    refused at admission, saying the bound and what to do; a session at the bound works, its labels not
    copied to the claim (only spec.labels and spec.podLabels reach the claim and the pod)."""
    crowded = session("many-labels", meta_labels={"team": "a", **many_labels(10_000)}, ttl="30m")
    refused = create(kube, crowded, policed)
    assert refused is not None and f"more than {MAX_SESSION_LABELS} labels" in refused, refused
    at_bound = session("bound-labels", meta_labels={"team": "a", **many_labels(MAX_SESSION_LABELS - 1)}, ttl="30m")
    assert create(kube, at_bound, policed) is None
    kube.wait_for(
        "the session at the label bound Ready",
        lambda: ((kube.get("agentsession", "bound-labels", policed) or {}).get("status") or {}).get("phase") == "Ready",
        timeout=90,
    )
    claim = kube.get("sandboxclaim", "bound-labels", policed) or {}
    copied = set((claim.get("metadata") or {}).get("labels") or {}) & set(many_labels(MAX_SESSION_LABELS - 1))
    assert not copied, "metadata labels were copied"
    kube.run("delete", "agentsession", "bound-labels", "-n", policed, "--wait=false")


def test_operator_healthy_and_a_normal_session_reaches_ready(
    kube: Kube, policed: str, operator: OperatorProcess
) -> None:
    """After every hostile manifest above (this test runs last in the module)."""
    assert operator.proc is not None and operator.proc.poll() is None, "the operator exited"
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.health_port}/healthz", timeout=5) as r:
        assert r.status == 200
    assert create(kube, session("normal", ttl="30m"), policed) is None
    kube.wait_for(
        "the normal session Ready",
        lambda: ((kube.get("agentsession", "normal", policed) or {}).get("status") or {}).get("phase") == "Ready",
        timeout=90,
    )
    # The webhook still answers at once.
    started = time.monotonic()
    error = create(kube, session("after", meta_labels={"team": "c"}), policed)
    assert error is not None and REFUSED in error and time.monotonic() - started < 5
