"""kube/cache.session_projection: the cached copy of a session keeps what any reader reads (the field lists
in kube/cache.py) and drops the rest; every decision on the projection is the decision on the full body."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from agentsession_api import names
from agentsession_operator.decisions import decide
from agentsession_operator.kube.cache import (
    SESSION_METADATA,
    SESSION_TOP,
    Cache,
    session_projection,
)
from agentsession_operator.kube.fairness import only_activity_changed

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
