"""One session pass, decided: everything the shell observed in, every action and the status out.

The shell (kube/session_pass.py) reads the session, its claim, its Sandbox, a fork's source, the
namespace's policies and warm pools, and calls :func:`decide` once. It resolves the settings in force
once (``policy_resolve.resolve``); every rule below reads that one :class:`Resolved`. Two later observations
come back here rather than being judged in the shell: the claim a create returned (:func:`after_create`)
and an API server's refusal of a claim write (:func:`refused`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from agentsession_api import names
from agentsession_api.activity import report_key
from agentsession_api.phases import Phase
from agentsession_api.timestamps import utc
from agentsession_api.views import SessionStatus, status_of
from agentsession_operator.decisions import (
    fork,
    lifecycle,
    lineage,
    network,
    policy,
    policy_merge,
    policy_resolve,
    policy_violations,
    quota,
    refusals,
    retention,
)
from agentsession_operator.decisions.actions import (
    DEFAULT_EXPIRY_WARNING,
    Action,
    ApplyNetworkPolicy,
    PatchStatus,
    ScheduleCheck,
    reconcile_actions,
)
from agentsession_operator.decisions.ownership import is_owned_by
from agentsession_operator.decisions.resolved import Resolved
from agentsession_operator.decisions.template_identity import TemplateIdentity
from agentsession_operator.decisions.template_policy import TemplatePolicy

FORK_RETRY = timedelta(seconds=2)  # a fork waiting on its source's PVCs looks again (no watch on PVCs)
FORK_RECHECK = timedelta(seconds=30)  # a fork that cannot be made is checked again (a StorageClass annotated later)
FORK_WAITING = "ForkWaiting"
"""The ScheduleCheck reason of a fork that cannot have its claim yet."""
RETENTION = "DeleteFinishedAfter"
"""The ScheduleCheck reason of a finished session's deletion time (cleanup.deleteFinishedAfter)."""


@dataclass(frozen=True)
class ForkInputs:
    """What the shell read for a fork that has no claim yet (decisions/fork.py plan_fork's inputs)."""

    source: Mapping[str, Any] | None
    claim: Mapping[str, Any] | None = None
    sandbox: Mapping[str, Any] | None = None
    pvcs: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    storage_classes: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Observed:
    """Everything one pass saw. ``peers`` is the namespace's cached sessions, read lazily (only under
    a maxSessionsPerLabel cap); ``pools`` the namespace's warm pools known to exist."""

    session: Mapping[str, Any]
    claim: Mapping[str, Any] | None
    sandbox: Mapping[str, Any] | None
    now: datetime
    policies: Sequence[Mapping[str, Any]] = ()
    pools: Collection[str] = ()
    label_domains: Sequence[str] | None = None
    peers: Iterable[Mapping[str, Any]] = ()
    places: Sequence[tuple[str, str]] = ()
    """The ranks of the namespace's sessions holding a place, sorted (maxSessionsPerNamespace)."""
    fork_inputs: ForkInputs | None = None
    """A fork without a claim: what its plan needs."""
    fork_source: Mapping[str, Any] | None = None
    """A fork with its claim but no recorded lineage: its source, if cached."""
    network_policy: Mapping[str, Any] | None = None
    network_settings: network.NetworkSettings = field(default_factory=network.NetworkSettings)
    template_policy: TemplatePolicy | None = None
    """The managed NetworkPolicy of the template behind the claim's warm pool, if it has one."""
    template_identity: TemplateIdentity | None = None
    """Whether that template gives its pods the identity token the clients check (None: not known)."""
    expiry_lead: timedelta | None = DEFAULT_EXPIRY_WARNING
    progress_written: datetime | None = None
    namespace_cap: int = quota.DEFAULT_MAX_SESSIONS_PER_NAMESPACE
    """The operator's cap of a namespace no policy caps (0: none; --max-sessions-per-namespace)."""


@dataclass(frozen=True)
class DeleteSession:
    """cleanup.deleteFinishedAfter: delete the finished session (by its UID)."""

    uid: str
    after: timedelta


@dataclass(frozen=True)
class Decision:
    """What one pass does, in this order: record ``lineage``, perform ``actions``, write ``status``,
    then ``retention``."""

    view: dict[str, Any]
    """The session as judged: activity stamped, a fork's volumes and pool, its lineage."""
    resolved: Resolved
    effective: policy_merge.EffectivePolicy
    lineage: list[dict[str, Any]] | None
    """status.lineage to write before anything else (None: as recorded)."""
    actions: list[Action]
    """Claim, Sandbox and NetworkPolicy work, Warnings and ScheduleChecks, in order; never PatchStatus."""
    status: dict[str, Any] | None
    """The status patch written after the actions (None: nothing changed)."""
    planned: dict[str, Any] | None
    """The verdict's own status patch, without the activity fields (a refusal builds on it)."""
    activity: SessionStatus
    """Status fields from a new activity report (the operator's clock), written with any status."""
    retention: DeleteSession | ScheduleCheck | None
    progress: bool | None
    """The status written is a provisioning session's progress (True), something else (False), none (None)."""
    missing_pool: str | None
    """A session without a claim names this warm pool, which ``pools`` lacks: the shell may read it and
    decide again (the cache can lag a pool just created)."""
    observed: Observed


def _activity(view: Mapping[str, Any], now: datetime, resolved: Resolved) -> SessionStatus:
    """A new activity report, stamped with the operator's clock. Only a bounded key of the annotation
    goes to status (a long one made every status write fail)."""
    report = ((view.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_ACTIVITY)
    if not isinstance(report, str) or not report or report_key(report) == status_of(view).get("lastActivityReport"):
        return {}
    found: SessionStatus = {"lastActivityReport": report_key(report)}
    found.update(lifecycle.activity_patch(report, now, resolved.max_idle_timeout) or {})
    return found


def _fork_view(seen: Observed) -> tuple[dict[str, Any], fork.ForkBlocked | None]:
    """A fork as policies and the claim see it (its source's volumes and pool, its lineage), or why it
    cannot have its claim yet."""
    session = dict(seen.session)
    if seen.fork_inputs is not None:
        inputs = seen.fork_inputs
        view = fork.judged_view(session, inputs.source)
        plan = fork.plan_fork(session, inputs.source, inputs.claim, inputs.sandbox, inputs.pvcs, inputs.storage_classes)
        if isinstance(plan, fork.ForkPlan):
            return fork.expand(view, plan.warm_pool, plan.volumes), None
        return view, plan
    if seen.claim is not None and fork.source_name(session):
        # A fork that has its claim keeps the pool it was created with (its spec may name none).
        view = fork.expand(session, fork.claim_warm_pool(seen.claim, session), None)
        if not lineage.recorded(view) and seen.fork_source is not None:  # forked before lineage was recorded
            view = fork.judged_view(view, seen.fork_source)
        return view, None
    return session, None


def _retention(
    view: Mapping[str, Any], status: Mapping[str, Any] | None, effective: policy_merge.EffectivePolicy, now: datetime
) -> DeleteSession | ScheduleCheck | None:
    after = effective.delete_finished_after.value if effective.delete_finished_after else None
    if after is None:
        return None
    judged = {**view, "status": {**(view.get("status") or {}), **(status or {})}}
    if retention.is_due(judged, after, now):
        return DeleteSession(str(view["metadata"]["uid"]), after)
    when = retention.deletion_time(judged, after)
    return ScheduleCheck(when, RETENTION) if when is not None else None


def _finish(decision: Decision, actions: Sequence[Action], planned: dict[str, Any] | None) -> Decision:
    """The status written (the verdict's, with any activity fields), retention and progress from it."""
    activity: dict[str, Any] = dict(decision.activity)
    status = {**planned, **activity} if planned is not None else (activity or None)
    # Recorded with the pass's first status write (no write of its own: a new session's only write is Ready).
    admitted = policy.labels_to_admit(decision.view) if status is not None else None
    if status is not None and admitted is not None and not lifecycle.is_deleting(decision.view):
        status = {**status, "admittedLabels": admitted}
    before = status_of(decision.view).get("phase")
    progress = None if status is None else before == Phase.PROVISIONING == status.get("phase")
    return replace(
        decision,
        actions=list(actions),
        status=status,
        planned=planned,
        retention=_retention(decision.view, status, decision.effective, decision.observed.now),
        progress=progress,
    )


def decide(seen: Observed) -> Decision:
    """The whole pass: from what was observed to every action and the status."""
    now = utc(seen.now)
    view, blocked = _fork_view(seen)
    recorded = lineage.recorded(view)
    lineage_patch = recorded if recorded != lineage.recorded(seen.session) else None
    effective = policy.effective_policy_for(view, seen.policies)
    resolved = policy_resolve.resolve(view, effective, now)
    activity = _activity(view, now, resolved)
    if activity:
        view = {**view, "status": {**(view.get("status") or {}), **activity}}
    pool = resolved.warm_pool  # spec.warmPoolRef, a policy default, or the fork's source's
    missing = pool if seen.claim is None and pool and pool not in seen.pools else None
    # Every pass, claim or not: PolicyCompliant is always the current verdict, and a running session that
    # breaks a policy is stopped. maxSessionsPerLabel likewise, ranked by creation order (decisions.quota).
    found = policy_violations.violations(
        view, effective, seen.label_domains, running=seen.claim is not None, resolved=resolved
    )
    found += quota.over_cap(view, effective, seen.peers)
    found += quota.over_namespace_cap(view, seen.policies, seen.places, default=seen.namespace_cap)
    actions = reconcile_actions(
        view,
        seen.claim,
        seen.sandbox,
        now,
        warm_pool_exists=missing is None,
        effective=effective,
        resolved=resolved,
        violations=found,
        fork=blocked,
        isolation=network.Isolation(seen.network_settings, seen.network_policy, seen.template_policy),
        identity=seen.template_identity,
        expiry_lead=seen.expiry_lead,
        progress_written=seen.progress_written,
    )
    planned = next((a.patch for a in actions if isinstance(a, PatchStatus)), None)
    rest = [a for a in actions if not isinstance(a, PatchStatus)]
    if blocked is not None:
        wait = FORK_RETRY if blocked.phase == Phase.PENDING else FORK_RECHECK
        rest.append(ScheduleCheck(now + wait, FORK_WAITING))
    decision = Decision(
        view=view,
        resolved=resolved,
        effective=effective,
        lineage=lineage_patch,
        actions=[],
        status=None,
        planned=None,
        activity=activity,
        retention=None,
        progress=None,
        missing_pool=missing,
        observed=seen,
    )
    return _finish(decision, rest, planned)


def after_create(decision: Decision, created: Mapping[str, Any]) -> Decision:
    """Judged again with the claim just created, as the claim's first watch event would be: the
    NetworkPolicy goes in now (NetworkIsolated is never True before it is applied), and the status is
    what that pass would write (for a new session nothing until it is Ready or has provisioned for
    PROGRESS_DELAY, not Pending "creating the claim"). A claim that is not the session's changes nothing."""
    view = decision.view
    if not is_owned_by(created, view["metadata"]["uid"]):
        return replace(decision, actions=[])
    seen = decision.observed
    running = policy_violations.violations(
        view, decision.effective, seen.label_domains, running=True, resolved=decision.resolved
    )
    follow = reconcile_actions(
        view,
        created,
        None,
        utc(seen.now),
        effective=decision.effective,
        resolved=decision.resolved,
        violations=running,
        isolation=network.Isolation(seen.network_settings, seen.network_policy, seen.template_policy),
        identity=seen.template_identity,
        expiry_lead=seen.expiry_lead,
    )
    planned = next((a.patch for a in follow if isinstance(a, PatchStatus)), None)
    kept = [a for a in follow if isinstance(a, ApplyNetworkPolicy | ScheduleCheck)]
    return _finish(decision, kept, planned)


def refused(decision: Decision, verb: str, code: int, message: str) -> dict[str, Any]:
    """The status written when the API server refused a claim write: why, on the planned status."""
    patch = refusals.refusal_status(decision.view, decision.planned, verb, code, message, utc(decision.observed.now))
    return {**patch, **dict(decision.activity)}
