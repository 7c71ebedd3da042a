"""kube/projection.session_projection: the cached copy of a session keeps what any reader reads (the field lists
in kube/cache.py) and drops the rest; every decision on the projection is the decision on the full body."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

from agentsession_api import names
from agentsession_operator.decisions import decide
from agentsession_operator.kube.cache import Cache
from agentsession_operator.kube.fairness import only_activity_changed
from agentsession_operator.kube.projection import SESSION_METADATA, SESSION_TOP, session_projection

Make = Callable[..., dict[str, Any]]
POOL = "python-pool"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def noisy(body: dict[str, Any]) -> dict[str, Any]:
    """`body` as the API server and kubectl hand it over: managedFields, a last-applied copy of the whole
    object, a tenant's own annotation, generateName, selfLink and a top-level key no reader knows."""
    out = copy.deepcopy(body)
    meta = out["metadata"]
    meta["managedFields"] = [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]
    meta.setdefault("annotations", {})[LAST_APPLIED] = '{"spec": {"warmPoolRef": {"name": "python-pool"}}}'
    meta["annotations"]["example.com/owner"] = "team-a"
    meta["generateName"] = "demo-"
    meta["selfLink"] = "/apis/agentsession.dev/v1alpha1/namespaces/ns/agentsessions/demo"
    meta["resourceVersion"] = "42"
    out["unknownTopLevel"] = {"x": 1}
    return out


def test_the_projection_keeps_the_listed_fields_and_drops_the_rest(make_session: Make) -> None:
    session = make_session(labels={"team": "a"}, deleting=True, status={"phase": "Pending"})
    session["metadata"]["annotations"] = {names.ANNOTATION_ACTIVITY: "2025-01-01T11:59:00Z"}
    session["metadata"]["finalizers"] = ["example.com/keep"]
    full = noisy(session)
    projected = session_projection(full)
    assert set(projected) <= SESSION_TOP and set(projected["metadata"]) <= SESSION_METADATA
    assert projected["metadata"]["annotations"] == {names.ANNOTATION_ACTIVITY: "2025-01-01T11:59:00Z"}
    kept = {k: v for k, v in full["metadata"].items() if k in SESSION_METADATA and k != "annotations"}
    assert {k: v for k, v in projected["metadata"].items() if k != "annotations"} == kept
    assert projected["spec"] == full["spec"] and projected["status"] == full["status"]
    assert (projected["apiVersion"], projected["kind"]) == (full["apiVersion"], full["kind"])
    assert "managedFields" in full["metadata"] and LAST_APPLIED in full["metadata"]["annotations"]  # untouched


def test_a_session_without_our_annotations_keeps_none(make_session: Make) -> None:
    projected = session_projection(noisy(make_session()))
    assert "annotations" not in projected["metadata"]


def test_the_cache_stores_the_projection(make_session: Make) -> None:
    cache = Cache()
    full = noisy(make_session())
    cache.remember_session(("ns", "demo"), full)
    assert cache.sessions[("ns", "demo")] == session_projection(full)


def _cases(make_session: Make, make_claim: Make, make_policy: Make, now: Any) -> list[decide.Observed]:
    """Passes that read metadata (labels, deletion, activity, ranks), spec and status."""
    waiting = make_session(status={"phase": "Pending", "observedGeneration": 1})
    active = make_session(labels={"team": "a"})
    active["metadata"]["annotations"] = {names.ANNOTATION_ACTIVITY: "2025-01-01T11:59:00Z busy=60"}
    capped = make_policy("cap", {"selector": {"matchLabels": {"team": "a"}}, "limits": {"maxIdleTimeout": "30m"}})
    return [
        decide.Observed(make_session(), None, None, now, pools={POOL}),
        decide.Observed(waiting, None, None, now, pools=()),
        decide.Observed(active, make_claim(), None, now, policies=[capped], pools={POOL}),
        decide.Observed(make_session(deleting=True), make_claim(), None, now, pools={POOL}),
        decide.Observed(make_session(spec={"warmPoolRef": {"name": POOL}, "ttl": "1m"}), make_claim(), None, now),
    ]


@pytest.mark.parametrize("case", range(5))
def test_every_decision_on_the_projection_is_the_decision_on_the_full_body(
    case: int, make_session: Make, make_claim: Make, make_policy: Make, now: Any
) -> None:
    seen = _cases(make_session, make_claim, make_policy, now)[case]
    full = noisy(dict(seen.session))
    on_full = decide.decide(decide.Observed(**{**seen.__dict__, "session": full}))
    on_projection = decide.decide(decide.Observed(**{**seen.__dict__, "session": session_projection(full)}))
    for name in ("actions", "status", "planned", "activity", "retention", "progress", "missing_pool", "lineage"):
        assert getattr(on_projection, name) == getattr(on_full, name), name
    assert on_projection.resolved == on_full.resolved and on_projection.effective == on_full.effective


def test_an_activity_only_change_is_still_told_apart_on_projections(make_session: Make) -> None:
    before = noisy(make_session())
    after = copy.deepcopy(before)
    after["metadata"]["annotations"][names.ANNOTATION_ACTIVITY] = "2025-01-01T11:59:00Z"
    after["metadata"]["resourceVersion"] = "43"
    assert only_activity_changed(session_projection(before), session_projection(after))
    relabelled = copy.deepcopy(after)
    relabelled["metadata"]["labels"] = {"team": "b"}
    assert not only_activity_changed(session_projection(before), session_projection(relabelled))


def maximal(make_session: Make) -> dict[str, Any]:
    """A session as large as the CRD lets a tenant make it where no decision reads the bytes: 64 env values of
    16 KiB, 32 pod annotations of 4 KiB, 8 volume templates with 32 annotations of 4 KiB each, 200 foreign
    finalizers of 300 characters, and an activity annotation padded to 64 KiB."""
    from agentsession_api import types as t

    spec: dict[str, Any] = {
        "warmPoolRef": {"name": POOL},
        "env": [{"name": f"V{i}", "value": "x" * t.MAX_ENV_VALUE} for i in range(t.MAX_ENV)],
        "podAnnotations": {f"example.com/a{i}": "y" * t.MAX_ANNOTATION_VALUE for i in range(t.MAX_MAP_ENTRIES)},
        "volumeClaimTemplates": [
            {
                "metadata": {
                    "name": f"v{v}",
                    "annotations": {
                        f"example.com/a{i}": "z" * t.MAX_ANNOTATION_VALUE for i in range(t.MAX_MAP_ENTRIES)
                    },
                },
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }
            for v in range(t.MAX_VOLUME_CLAIM_TEMPLATES)
        ],
    }
    session = make_session(spec=spec, deleting=True)
    session["metadata"]["finalizers"] = [f"example.com/{i:03d}-{'f' * 280}" for i in range(200)]
    session["metadata"]["annotations"] = {names.ANNOTATION_ACTIVITY: "2025-01-01T11:59:00Z" + " " * 65536}
    return session


def test_a_cached_session_costs_the_same_whatever_the_tenant_writes(make_session: Make) -> None:
    """Attack (issue 49 item 2): a tenant fills every free-form field a session has (about 3 MiB here) and
    creates hundreds: the cache kept spec and finalizers whole, so each cost the operator megabytes and a
    few hundred of them took a 768 Mi operator down for every tenant. Now the cached copy keeps only what
    decisions read (env names and annotation keys, bounded by the CRD; volume sizes and classes; no
    finalizers) and a bounded activity annotation: a session maximal in every value costs at most 12 KiB
    more than a minimal one (its 64 env names and 288 annotation keys)."""
    import json

    small = len(json.dumps(session_projection(noisy(make_session()))))
    large = len(json.dumps(session_projection(noisy(maximal(make_session)))))
    assert large - small <= 12 * 1024, f"a maximal session caches {large - small} bytes more than a minimal one"


def crowded(make_session: Make) -> dict[str, Any]:
    """A session whose metadata a tenant filled where the API server bounds each entry, not their number:
    4,000 labels (valid keys and values, about 1 MiB, under etcd's request limit) and 2,000 owner
    references."""
    session = make_session()
    meta = session["metadata"]
    meta["labels"] = {f"example.com/k{i:05d}-{'k' * 50}": "v" * 63 for i in range(4000)}
    meta["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "o" * 253, "uid": f"{i:036d}"} for i in range(2000)
    ]
    return session


def test_a_session_crowded_with_labels_and_owners_costs_the_cache_a_bounded_amount(make_session: Make) -> None:
    """Attack (issue 49 item 2, the part left open): the cache kept a session's labels and owner references
    whole, and nothing bounds their number. 4,000 labels and 2,000 owner references cost the operator
    about 1.2 MiB per session, as the spec's values did before the projection."""
    import json

    small = len(json.dumps(session_projection(make_session())))
    large = len(json.dumps(session_projection(crowded(make_session))))
    assert large - small <= 32 * 1024, f"a crowded session caches {large - small} bytes more than a minimal one"


def test_a_session_with_too_many_labels_is_refused_not_half_read(make_session: Make) -> None:
    """What the cache does not keep, no decision may judge: a session over the bound on labels is refused
    (at admission, and at reconcile from its cached copy) with a message that says what to fix, never
    judged on some of its labels (a policy selecting on a dropped one would not apply)."""
    from agentsession_operator.decisions import policy_violations

    found = policy_violations.violations(session_projection(crowded(make_session)))
    assert any("metadata.labels" in v and "at most 64" in v for v in found), found
    assert not policy_violations.violations(session_projection(make_session()))


def crowded_claim(make_claim: Make) -> dict[str, Any]:
    """The claim the operator builds for a maximal session (its env values and pod annotations), as a tenant
    allowed to write SandboxClaims can also make one: 2,000 owner references, 4,000 labels."""
    from agentsession_api import types as t

    claim = make_claim()
    claim["spec"]["env"] = [{"name": f"V{i}", "value": "x" * t.MAX_ENV_VALUE} for i in range(t.MAX_ENV)]
    claim["spec"]["additionalPodMetadata"] = {
        "annotations": {f"example.com/a{i}": "y" * t.MAX_ANNOTATION_VALUE for i in range(t.MAX_MAP_ENTRIES)},
        "labels": {"sandbox.users.io/team": "a"},
    }
    claim["metadata"]["ownerReferences"] += [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "o" * 253, "uid": f"{i:036d}"} for i in range(2000)
    ]
    claim["metadata"]["labels"] = {f"example.com/k{i:05d}-{'k' * 50}": "v" * 63 for i in range(4000)}
    return claim


def test_a_claim_costs_the_cache_a_bounded_amount_whatever_its_session_or_a_tenant_writes(make_claim: Make) -> None:
    """Attack (issue 49 item 2, every object the operator keeps): the claim the operator builds for a session
    carries its env values (64 of 16 KiB) and pod annotations (32 of 4 KiB); a tenant allowed to create
    SandboxClaims can label its own as ours and crowd their metadata. The cache kept every claim whole but
    its managedFields (slim): 2.4 MB for such a claim, whatever the session's own cached copy saves."""
    import json

    cache = Cache()
    cache.remember_claim(("ns", "small"), make_claim("small"))
    cache.remember_claim(("ns", "crowded"), crowded_claim(make_claim))
    small = len(json.dumps(cache.claims[("ns", "small")]))
    large = len(json.dumps(cache.claims[("ns", "crowded")]))
    assert large - small <= 32 * 1024, f"a crowded claim caches {large - small} bytes more than a plain one"


@pytest.mark.parametrize("case", range(5))
def test_every_decision_on_projected_children_is_the_decision_on_the_full_bodies(
    case: int, make_session: Make, make_claim: Make, make_policy: Make, now: Any
) -> None:
    """The claim's projection (kube/projection.child_projection) leaves every decision as it was."""
    from agentsession_operator.kube.projection import child_projection

    seen = _cases(make_session, make_claim, make_policy, now)[case]
    if seen.claim is None:
        seen = decide.Observed(**{**seen.__dict__, "claim": make_claim()})
    claim = noisy(dict(seen.claim))  # type: ignore[arg-type]
    claim["spec"]["env"] = [{"name": "V", "value": "x" * 1000}]
    on_full = decide.decide(decide.Observed(**{**seen.__dict__, "claim": claim}))
    on_projection = decide.decide(decide.Observed(**{**seen.__dict__, "claim": child_projection(claim)}))
    for name in ("actions", "status", "planned", "activity", "retention", "progress", "missing_pool", "lineage"):
        assert getattr(on_projection, name) == getattr(on_full, name), name


def test_a_network_policy_crowded_with_rules_is_cached_as_truncated() -> None:
    """A NetworkPolicy labelled as ours with 10,000 rules (a tenant's, or ours edited) is kept as
    TRUNCATED_SPEC: it never equals what the operator builds, so a session's own is put back."""
    from agentsession_operator.kube.projection import MAX_CACHED_SPEC, TRUNCATED_SPEC

    rules = [{"from": [{"ipBlock": {"cidr": f"10.{i // 256 % 256}.{i % 256}.0/24"}}]} for i in range(10_000)]
    body = {"metadata": {"name": "agentsession-x", "namespace": "ns"}, "spec": {"ingress": rules}}
    cache = Cache()
    cache.remember_network_policy(("ns", "agentsession-x"), body)
    assert cache.network_policies[("ns", "agentsession-x")]["spec"] == TRUNCATED_SPEC
    small = {"metadata": {"name": "agentsession-y", "namespace": "ns"}, "spec": {"ingress": rules[:10]}}
    cache.remember_network_policy(("ns", "agentsession-y"), small)
    assert cache.network_policies[("ns", "agentsession-y")]["spec"] == {"ingress": rules[:10]}
    assert MAX_CACHED_SPEC >= 16 * 1024


def test_a_sandbox_costs_the_cache_a_bounded_amount_whatever_a_tenant_writes_on_it(make_sandbox: Make) -> None:
    """Attack (issue 49 item 2, the Sandbox left): a tenant allowed to patch the Sandboxes of its namespace
    (their pods are its sandboxes) crowds one's metadata past anything a decision reads: 2,000 owner
    references, 4,000 labels, 250 KiB of annotations (about 1.4 MiB, under etcd's limit). The cache kept every
    Sandbox's metadata whole (slim drops only managedFields and the pod template): 1.5 MB for one Sandbox."""
    import json

    cache = Cache()
    cache.remember_sandbox(("ns", "small"), make_sandbox("small"))
    crowded = make_sandbox("crowded")
    crowded["metadata"]["ownerReferences"] += [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "o" * 253, "uid": f"{i:036d}"} for i in range(2000)
    ]
    crowded["metadata"]["labels"] = {f"example.com/k{i:05d}-{'k' * 50}": "v" * 63 for i in range(4000)}
    crowded["metadata"]["annotations"] = {"example.com/a": "y" * (250 << 10)}  # the API server's total: 256 KiB
    cache.remember_sandbox(("ns", "crowded"), crowded)
    small = len(json.dumps(cache.sandboxes[("ns", "small")]))
    large = len(json.dumps(cache.sandboxes[("ns", "crowded")]))
    assert large - small <= 32 * 1024, f"a crowded Sandbox caches {large - small} bytes more than a plain one"


@pytest.mark.parametrize("mode", [None, "Suspended"])
def test_every_decision_on_a_projected_sandbox_is_the_decision_on_the_full_one(
    mode: str | None, make_session: Make, make_claim: Make, make_sandbox: Make, now: Any
) -> None:
    """The Sandbox's projection (kube/projection.sandbox_projection) keeps what decisions read: its claim
    owner, agent-sandbox's launch-type label, the generation, the status."""
    from agentsession_operator.decisions.actions import reconcile_actions
    from agentsession_operator.kube.cache import SANDBOX_SPEC_UNUSED
    from agentsession_operator.kube.projection import sandbox_projection
    from tests.unit.operator.test_op_actions import ready_claim

    spec = {"warmPoolRef": {"name": "p"}, "idleTimeout": "15m", "idleAction": "Hibernate"}
    sandbox = noisy(make_sandbox(mode=mode, launch="warm", generation=2, ready_generation=2))
    sandbox["metadata"]["labels"].update({f"a{i}.example.com/x": "y" for i in range(100)})  # sorted first
    sandbox["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": f"u{i}"} for i in range(10)
    ] + sandbox["metadata"]["ownerReferences"]
    session, claim = make_session(spec=spec), ready_claim(make_claim)
    projected = sandbox_projection(sandbox, SANDBOX_SPEC_UNUSED)
    assert projected["metadata"]["labels"] == {"agents.x-k8s.io/launch-type": "warm"}
    for at in (now, now + dt.timedelta(minutes=20)):
        assert reconcile_actions(session, claim, projected, at) == reconcile_actions(session, claim, sandbox, at)
