"""Issue 49 item 6: what admission checked, re-checked at reconcile. Admission refuses a label change that
takes a session out of a policy that selects it (admission/rules.departures: a session may only become
more constrained); when that check did not run (the webhook down, or failing open as it did before issue
49), the stored change widened what applied to the session, its egress among it, from the next pass."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentsession_operator.decisions import decide

Make = Callable[..., dict[str, Any]]
POOL = "python-pool"


def _tight(make_policy: Make) -> dict[str, Any]:
    return make_policy(
        "team-a-tight",
        {
            "selector": {"matchLabels": {"team": "a"}},
            "limits": {"maxIdleTimeout": "30m"},
            "egress": {"allowCIDRs": ["10.0.0.0/8"]},
        },
    )


def test_a_relabelled_session_stays_under_the_policies_its_first_labels_selected(
    make_session: Make, make_claim: Make, make_policy: Make, now: Any
) -> None:
    """Attack: a running session labelled team=a under team-a-tight is relabelled team=b while no webhook
    answers. The policy must still hold for it at every pass: its idle maximum and its egress."""
    first = decide.decide(
        decide.Observed(
            make_session(labels={"team": "a"}), make_claim(), None, now, policies=[_tight(make_policy)], pools={POOL}
        )
    )
    assert first.effective.max_idle_timeout is not None and first.effective.egress
    recorded = {**(first.status or {})}
    relabelled = make_session(labels={"team": "b"}, status=recorded)
    later = decide.decide(
        decide.Observed(relabelled, make_claim(), None, now, policies=[_tight(make_policy)], pools={POOL})
    )
    assert later.effective.max_idle_timeout == first.effective.max_idle_timeout, "the relabel lifted the policy"
    assert later.effective.egress == first.effective.egress, "the relabel widened the egress"


def test_admission_still_refuses_the_relabel_and_then_takes_unrelated_writes(
    make_session: Make, make_policy: Make
) -> None:
    """status.admittedLabels keeps the policy holding, but the writer of a departing relabel is still told
    at admission what to put back; a session that departed before (past admission) takes unrelated writes."""
    from agentsession_operator.admission import rules as admission

    recorded = {"admittedLabels": {"team": "a"}}
    stored = make_session(labels={"team": "a"}, status=recorded)
    relabelled = make_session(labels={"team": "b"}, status=recorded)
    found = admission.departures(relabelled, stored, [_tight(make_policy)])
    assert len(found) == 1 and "team-a-tight" in found[0] and "restore team=a" in found[0], found
    touched = make_session(labels={"team": "b", "note": "x"}, status=recorded)
    assert admission.departures(touched, relabelled, [_tight(make_policy)]) == []
