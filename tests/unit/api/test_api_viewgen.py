"""The specs' views are generated from the pydantic models (issue 50 item 2): a renamed field renames its
accessor, and a stale file fails here."""

from __future__ import annotations

from agentsession_api import types, viewgen
from agentsession_api import views_generated as generated
from agentsession_api.views import Policy, Session
from agentsession_api.views_generated import AgentSessionPolicySpecView, PolicyLimitsView


def test_the_views_are_generated_from_the_models() -> None:
    assert viewgen.drift() == [], "views_generated.py is stale: run `make crds`"


def test_every_field_of_every_spec_model_has_its_accessor() -> None:
    for model in (types.AgentSessionSpec, types.AgentSessionPolicySpec, types.PolicyLimits, types.CleanupRules):
        view = getattr(generated, f"{model.__name__}View")
        assert set(model.model_fields) <= set(dir(view)), model.__name__


def test_a_view_reads_the_json_keys_and_keeps_absent_apart_from_empty() -> None:
    policy = Policy({"spec": {"limits": {"allowedWarmPools": [], "maxTtl": "1h"}, "cleanup": {}}})
    limits = policy.spec_view.limits
    assert (limits.allowed_warm_pools, limits.allowed_storage_classes, limits.max_ttl) == ([], None, "1h")
    assert not policy.spec_view.cleanup and not policy.spec_view.egress  # empty or absent: a false view
    assert not PolicyLimitsView(None).env.allow and AgentSessionPolicySpecView({}).labels.required is None
    session = Session({"spec": {"forkFrom": {"name": "src"}, "env": [{"name": "A", "value": "1"}]}})
    assert session.spec_view.fork_from.name == "src"
    assert [(e.name, e.value) for e in session.spec_view.env] == [("A", "1")]
