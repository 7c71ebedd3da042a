"""AgentSessionPolicy limits.allowHibernate and limits.maxCheckpointSize (issue 33): refused at admission,
a plain Suspend at reconcile, the image bounded by the smallest bound."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from agentsession_api import phases
from agentsession_operator.admission import rules as admission
from agentsession_operator.decisions import hibernate
from agentsession_operator.decisions.actions import HibernateSandbox, PatchSandbox, PatchStatus, reconcile_actions
from agentsession_operator.decisions.conditions import find_condition
from agentsession_operator.decisions.policy_merge import merge_policies
from agentsession_operator.decisions.policy_resolve import resolve

Make = Callable[..., dict[str, Any]]
T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
FORBIDS = {"limits": {"allowHibernate": False}}


def test_any_policy_forbidding_hibernate_forbids_it_and_the_smallest_bound_wins(make_policy: Make) -> None:
    effective = merge_policies(
        [
            make_policy("b-allows", {"limits": {"allowHibernate": True, "maxCheckpointSize": "1Gi"}}),
            make_policy("a-forbids", {"limits": {"allowHibernate": False, "maxCheckpointSize": "256Mi"}}),
        ]
    )
    assert effective.hibernate_denied is not None and effective.hibernate_denied.policy == "a-forbids"
    assert effective.max_checkpoint is not None and effective.max_checkpoint.value == 256 * 1024 * 1024
    assert merge_policies([make_policy("p", {"limits": {"allowHibernate": True}})]).hibernate_denied is None


def test_a_session_asking_for_hibernate_is_refused_naming_the_policy(make_session: Make, make_policy: Make) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "idleAction": "Hibernate"})
    found = admission.review(session, [make_policy("no-memory", FORBIDS)], [], [], "CREATE")
    assert found == [
        "spec.idleAction: Hibernate is not allowed (spec.limits.allowHibernate: false) (AgentSessionPolicy "
        "no-memory); use Suspend (the workspace volume is kept, the processes are not), or ask for the policy "
        "to allow Hibernate"
    ]
    assert admission.review(session, [make_policy("ok", {})], [], [], "CREATE") == []


def test_an_update_to_hibernate_is_refused_and_one_that_had_it_is_warned(make_session: Make, make_policy: Make) -> None:
    policies = [make_policy("no-memory", FORBIDS)]
    old = make_session(spec={"warmPoolRef": {"name": "p"}, "idleAction": "Suspend"})
    new = make_session(spec={"warmPoolRef": {"name": "p"}, "idleAction": "Hibernate"})
    assert any("allowHibernate" in s for s in admission.review(new, policies, [], [], "UPDATE", old))
    # Stored before the policy: other writes go on (activity, suspend), warned, and it suspends as Suspend.
    assert admission.review(new, policies, [], [], "UPDATE", new) == []
    assert any("allowHibernate" in s for s in admission.standing_violations(new, policies, [], new))


def test_a_policy_default_of_hibernate_is_not_refused(make_session: Make, make_policy: Make) -> None:
    policies = [make_policy("defaults", {"defaults": {"idleAction": "Hibernate"}}), make_policy("z", FORBIDS)]
    session = make_session(spec={"warmPoolRef": {"name": "p"}})
    assert admission.review(session, policies, [], [], "CREATE") == []


def _idle(
    make_session: Make, make_claim: Make, make_sandbox: Make, policies: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[Any]]:
    from tests.unit.operator.test_op_actions import ready_claim, settle

    spec = {"warmPoolRef": {"name": "p"}, "idleTimeout": "15m", "idleAction": "Hibernate"}
    effective = merge_policies(policies)
    session = make_session(spec=spec)
    claim = ready_claim(make_claim)
    session = settle(session, reconcile_actions(session, claim, make_sandbox(), T0, effective=effective))
    return session, reconcile_actions(session, claim, make_sandbox(), T0 + timedelta(minutes=20), effective=effective)


def test_a_forbidden_hibernate_suspends_as_suspend_saying_why(
    make_session: Make, make_claim: Make, make_sandbox: Make, make_policy: Make
) -> None:
    session, actions = _idle(make_session, make_claim, make_sandbox, [make_policy("no-memory", FORBIDS)])
    assert not [a for a in actions if isinstance(a, HibernateSandbox)]
    assert PatchSandbox("demo", {"spec": {"operatingMode": "Suspended"}}) in actions
    statuses = [a.patch for a in actions if isinstance(a, PatchStatus)] or [session["status"]]
    cond = find_condition(statuses[0]["conditions"], phases.COND_HIBERNATED)
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", phases.REASON_HIBERNATE_FORBIDDEN)
    assert "AgentSessionPolicy no-memory forbids Hibernate" in cond["message"]


def test_the_policys_bound_goes_with_the_checkpoint(
    make_session: Make, make_claim: Make, make_sandbox: Make, make_policy: Make
) -> None:
    _, actions = _idle(
        make_session, make_claim, make_sandbox, [make_policy("small", {"limits": {"maxCheckpointSize": "1Mi"}})]
    )
    (hib,) = [a for a in actions if isinstance(a, HibernateSandbox)]
    assert hib.max_bytes == 1024 * 1024
    assert hibernate.max_bytes_for(512 * 1024 * 1024, hib.max_bytes) == 1024 * 1024
    assert hibernate.max_bytes_for(100, hib.max_bytes) == 100  # the operator's own bound stays
    assert hibernate.max_bytes_for(100, None) == 100


def test_resolve_carries_the_forbidding_policy(make_session: Make, make_policy: Make) -> None:
    resolved = resolve(make_session(spec={"idleAction": "Hibernate"}), merge_policies([make_policy("x", FORBIDS)]))
    assert resolved.hibernate_forbidden_by == "AgentSessionPolicy x"
    assert not hibernate.hibernates(resolved, suspend_requested=False)
