"""One reconcile pass as data: given what is observed, the list of actions the reconciler should perform.

The reconciler (kube/reconciler.py) fetches the session, its claim (by :func:`naming.claim_name`), the
Sandbox named in the claim's status, whether the warm pool exists and the applicable policies, calls
:func:`reconcile_actions`, and executes the actions in order (claim work first, the status patch after).
Nothing here does I/O, so every decision is unit-tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from agentsession_api import phases
from agentsession_api.durations import format_duration
from agentsession_api.phases import Phase
from agentsession_api.timestamps import format_time, utc
from agentsession_api.views import Claim, Sandbox, Session, Status
from agentsession_operator import constants
from agentsession_operator.decisions import desired, hibernate, lifecycle, network, template_identity, template_policy
from agentsession_operator.decisions.conditions import find_condition, set_condition
from agentsession_operator.decisions.fork import ForkBlocked
from agentsession_operator.decisions.ownership import is_owned_by
from agentsession_operator.decisions.policy_merge import EMPTY_POLICY, EffectivePolicy
from agentsession_operator.decisions.policy_resolve import resolve
from agentsession_operator.decisions.resolved import Resolved
from agentsession_operator.decisions.status import compute_status


@dataclass(frozen=True)
class CreateClaim:
    """Create this SandboxClaim (a 409 Conflict means it exists already: re-read and reconcile again)."""

    manifest: dict[str, Any]


@dataclass(frozen=True)
class PatchClaim:
    """Merge-patch the session's SandboxClaim."""

    name: str
    patch: dict[str, Any]


@dataclass(frozen=True)
class DeleteClaim:
    """Delete the session's SandboxClaim (the Sandbox, Pod, Service and PVCs follow by garbage collection)."""

    name: str
    reason: str


@dataclass(frozen=True)
class PatchSandbox:
    """Merge-patch the Sandbox bound to the claim (operatingMode: the claim has no suspend field)."""

    name: str
    patch: dict[str, Any]


@dataclass(frozen=True)
class HibernateSandbox:
    """idleAction Hibernate: checkpoint the sandbox's pod (the node agent), record it, then suspend as
    PatchSandbox would. Without a node agent, or when the checkpoint fails, only the suspend."""

    name: str
    pod: str
    checkpoint: str
    suspend: dict[str, Any]
    max_bytes: int | None = None
    """The policies' limits.maxCheckpointSize (None: the operator's --max-checkpoint-size alone)."""
    hibernated_budget: int | None = None
    """The policies' limits.maxHibernatedSize: what the namespace's hibernated sessions keep together."""
    budget_policy: str = ""
    """The policy that sets it (named in the fallback's message)."""
    node: str = ""
    """The sandbox's node (its Sandbox's status.nodeName): only that node's agent is asked. "" when the
    Sandbox does not say (then every agent is asked, as before the node was known)."""
    taken_at: str = ""
    """The record's takenAt, from which ``checkpoint`` is named (issue 49 item 7); "" : the time of the write."""
    pod_spec_digest: str = ""
    """The Sandbox's pod spec the checkpoint is taken from (hibernate.pod_spec_digest): a wake into another
    one starts fresh (issue 49 item 7)."""


@dataclass(frozen=True)
class FinishRestore:
    """The restored pod is Ready: the image is deleted and status.hibernation says it woke."""

    checkpoint: str
    record: dict[str, Any]


@dataclass(frozen=True)
class ForgetCheckpoint:
    """A session that ended (expired, or deleted while a finalizer keeps it) still has a checkpoint image:
    deleted now (it holds the sandbox's memory), in the background, bounded (decisions/hibernate.py)."""

    checkpoint: str


@dataclass(frozen=True)
class PatchStatus:
    """Merge-patch the session's status subresource (None values clear fields)."""

    patch: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ApplyNetworkPolicy:
    """Create the session's NetworkPolicy, or replace the spec of the one it owns (``current`` is not None)."""

    manifest: dict[str, Any]
    current: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ScheduleCheck:
    """Reconcile again at ``at`` (the next TTL or idle deadline) even if nothing changes."""

    at: datetime
    reason: str


@dataclass(frozen=True)
class Warn:
    """Post a Warning Event about the session (a lowered maxTtl, an expiry coming soon)."""

    reason: str
    message: str


Action = (
    CreateClaim
    | PatchClaim
    | DeleteClaim
    | PatchSandbox
    | HibernateSandbox
    | FinishRestore
    | ForgetCheckpoint
    | ApplyNetworkPolicy
    | PatchStatus
    | ScheduleCheck
    | Warn
)

DEFAULT_EXPIRY_WARNING = timedelta(minutes=10)
"""How long before its expiry a session gets an ExpiringSoon Warning Event (operator flag --expiry-warning)."""
REASON_MAX_TTL_LOWERED = "MaxTtlLowered"
REASON_EXPIRING_SOON = "ExpiringSoon"


PROGRESS_DELAY = timedelta(seconds=15)
"""How long a new session's provisioning (the phase itself, its claim's Ready message, the pod's
address) may wait before it is written to the status. Most sessions are Ready sooner: their first
status is Ready, written once, not Provisioning and then once per step agent-sandbox reports; a slow
one (an image pull, a full node) shows Provisioning and the latest step after this long (counted from
its creation), then each time it has waited twice as long as at the last write (15, 30, 60 s...).
Pending, Failed and every other verdict are written at once. Each write is an AgentSession status
PATCH, which costs the API server about twice a ConfigMap PATCH (its schema, six conditions): under
load 250 sessions created at once wrote 6 statuses each, one per step; Provisioning and Ready, 2."""
PROGRESS_CHECK = "ProvisioningProgress"
"""The ScheduleCheck reason of a deferred progress write (the reconciler's pass then reads its cache)."""
_PROGRESS_FIELDS = ("sandboxName", "podName", "podIPs", "serviceFQDN", "launchType")


def _without_progress(status: Mapping[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in status.items() if k not in _PROGRESS_FIELDS}
    kept["conditions"] = [
        {k: v for k, v in c.items() if k not in ("reason", "message")} if c.get("type") == phases.COND_READY else c
        for c in status.get("conditions") or []
    ]
    return kept


def progress_deferred_until(
    before: Mapping[str, Any],
    status: Mapping[str, Any],
    now: datetime,
    written: datetime | None = None,
    created: datetime | None = None,
) -> datetime | None:
    """When a change that is only a provisioning session's progress may be written (None: write it now).

    A new session's first status, when it is Provisioning: PROGRESS_DELAY after the session's creation
    (`created`), so that a session Ready sooner has one status write, Ready. Then, while a session that
    was never Ready is Provisioning: PROGRESS_DELAY after it became so (its Ready condition's
    lastTransitionTime), and after a progress write at `written`, once it has waited twice as long as
    then. The pass writes nothing meanwhile and looks again at that time.
    """
    was = Status(before)
    if Status(status).phase != Phase.PROVISIONING:
        return None
    if not was.phase:
        if created is None or now >= created + PROGRESS_DELAY:
            return None
        return created + PROGRESS_DELAY
    if was.phase != Phase.PROVISIONING:
        return None
    ready = was.condition(phases.COND_READY)
    if was.ready_at or ready.reason == phases.REASON_SANDBOX_UNAVAILABLE:
        return None
    since = ready.last_transition_time
    if since is None:
        return None
    due = since + PROGRESS_DELAY
    if written is not None and written > since:
        due = max(due, since + 2 * (written - since))
    if now >= due:
        return None
    if patch_changes(_without_progress(before), _without_progress(status)):
        return None
    return due


def patch_changes(current: Any, patch: Any) -> bool:
    """True when applying ``patch`` as a JSON merge patch (RFC 7386) would change ``current``."""
    if not isinstance(patch, Mapping):
        return bool(current != patch)
    if not isinstance(current, Mapping):
        return True
    for key, value in patch.items():
        if value is None:
            if current.get(key) is not None:
                return True
        elif patch_changes(current.get(key), value):
            return True
    return False


def _claim_actions(
    session: Mapping[str, Any],
    claim: Mapping[str, Any],
    sandbox: Mapping[str, Any] | None,
    status: Mapping[str, Any],
    now: datetime,
    resolved: Resolved,
) -> list[Action]:
    """Keep a live, owned claim and its Sandbox where the session wants them."""
    name = claim["metadata"]["name"]
    actions: list[Action] = []
    patch = desired.claim_patch_for_ttl(claim, lifecycle.expires_at(session, resolved))
    if patch is not None:
        actions.append(PatchClaim(name, patch))
    owned = Claim(claim)
    bound = owned.bound_sandbox
    if sandbox is not None and bound and Sandbox(sandbox).name == bound and is_owned_by(sandbox, owned.uid):
        mode = lifecycle.desired_operating_mode(session, status, resolved, now, desired.sandbox_operating_mode(sandbox))
        mode_patch = desired.sandbox_patch_for_mode(sandbox, mode)
        actions += _mode_actions(session, claim, sandbox, bound, mode, mode_patch, status, resolved, now)
    return actions


def _mode_actions(
    session: Mapping[str, Any],
    claim: Mapping[str, Any],
    sandbox: Mapping[str, Any],
    bound: str,
    mode: str,
    mode_patch: dict[str, Any] | None,
    status: Mapping[str, Any],
    resolved: Resolved,
    now: datetime,
) -> list[Action]:
    """The Sandbox's operating mode, with Hibernate's checkpoint before an idle suspend and its restore
    annotation on the wake (issue 33)."""
    view = Session(session)
    kept = hibernate.kept_checkpoint(session)
    # A checkpoint of another pod spec: the wake starts fresh, the image goes (issue 49 item 7).
    stale = kept is not None and hibernate.pod_spec_changed(session, sandbox)
    claim_name = claim["metadata"]["name"]
    if mode_patch is None:
        # Woken: the session Ready again. The annotation goes from the claim, then the Sandbox (a restart
        # must start fresh), also when a pass recorded the wake but failed to clear one of them; the wake is
        # recorded once, while the status still keeps the checkpoint (a second record would hide a
        # RestoreFailed the first one wrote).
        if mode != constants.OPERATING_MODE_RUNNING or Status(status).phase != Phase.READY:
            return []
        actions: list[Action] = []
        if hibernate.claim_restore_from(claim):
            actions.append(PatchClaim(claim_name, hibernate.clear_restore_claim_patch()))
        if hibernate.sandbox_restore_from(sandbox):
            actions.append(PatchSandbox(bound, hibernate.clear_restore_patch()))
        if kept:
            record = (
                hibernate.spec_changed_record(kept) if stale else hibernate.restored_record(dict(view.hibernation), now)
            )
            actions.append(FinishRestore(kept, record))
        return actions
    if mode == constants.OPERATING_MODE_SUSPENDED:
        pod = view.pod_name or bound
        # A checkpoint already kept (the pass after the hibernate saw its status, not yet the Sandbox's
        # suspend): suspend only, never checkpoint a sandbox that is gone and overwrite the record.
        if kept is None and hibernate.hibernates(resolved, view.suspend):
            # The image's name is this hibernation's own: the record's takenAt, which the wake recomputes it from.
            taken_at = format_time(now)
            name = hibernate.checkpoint_name(view.name, view.uid, taken_at)
            budget, budget_policy = resolved.max_hibernated or (None, "")
            node = Sandbox(sandbox).node_name
            return [
                HibernateSandbox(
                    bound,
                    str(pod),
                    name,
                    mode_patch,
                    resolved.max_checkpoint_bytes,
                    budget,
                    budget_policy,
                    node,
                    taken_at,
                    hibernate.pod_spec_digest(sandbox),
                )
            ]
        return [PatchSandbox(bound, mode_patch)]
    if stale and kept is not None:
        return [PatchSandbox(bound, mode_patch), FinishRestore(kept, hibernate.spec_changed_record(kept))]
    wake = hibernate.wake_patch(kept)
    if not wake:
        return [PatchSandbox(bound, mode_patch)]
    mode_patch = {"spec": {**mode_patch["spec"], **wake["spec"]}}
    return [PatchClaim(claim_name, hibernate.wake_claim_patch(kept)), PatchSandbox(bound, mode_patch)]


def _stop_for_policy(claim: Mapping[str, Any], sandbox: Mapping[str, Any] | None) -> list[Action]:
    """Suspend the Sandbox of a session that now breaks a policy (the claim and its volumes stay), or of a
    deleted one whose claim lingers."""
    bound = Claim(claim).bound_sandbox
    if sandbox is None or not bound or Sandbox(sandbox).name != bound:
        return []
    if not is_owned_by(sandbox, Claim(claim).uid):
        return []
    patch = desired.sandbox_patch_for_mode(sandbox, constants.OPERATING_MODE_SUSPENDED)
    return [PatchSandbox(bound, patch)] if patch is not None else []


def _isolation(
    session: Mapping[str, Any],
    owned: Mapping[str, Any] | None,
    status: dict[str, Any],
    now: datetime,
    effective: EffectivePolicy,
    isolation: network.Isolation,
    sandbox: Mapping[str, Any] | None = None,
) -> list[Action]:
    """The session's NetworkPolicy once its claim exists, and the NetworkIsolated condition saying so:
    True only when it is applied and applies (a hostNetwork pod ignores every NetworkPolicy)."""
    view = Session(session)
    conditions = status.get("conditions")
    if owned is None or lifecycle.is_deleting(owned) or not Claim(owned).uid:
        if find_condition(conditions, phases.COND_NETWORK_ISOLATED) is not None:
            status["conditions"] = set_condition(
                conditions, phases.COND_NETWORK_ISOLATED, False, "NoSandbox", "no claim", now, view.generation
            )
        return []
    egress = network.merge_egress(effective.egress)
    wanted = network.desired_network_policy(session, owned, egress, isolation.settings)
    current = isolation.current
    actions: list[Action] = []
    if current is not None and not is_owned_by(current, view.uid):
        verdict = (
            False,
            "NameConflict",
            f"a NetworkPolicy {wanted['metadata']['name']} not owned by this session exists",
        )
    else:
        if not network.in_place(current, wanted, view.uid):
            actions.append(ApplyNetworkPolicy(wanted, current))
        # Applied before the status is written: a failed apply fails the pass, so True is never early.
        verdict = (
            True,
            "NetworkPolicyApplied",
            f"NetworkPolicy {wanted['metadata']['name']}: {network.describe(egress)}",
        )
        if network.host_network(sandbox):
            verdict = (
                False,
                "HostNetwork",
                "the sandbox's pod template sets hostNetwork: it shares the node's network and no "
                f"NetworkPolicy applies to it (NetworkPolicy {wanted['metadata']['name']} is in place for "
                "when the template stops)",
            )
        elif (opened := template_policy.wider(isolation.template)) is not None:
            verdict = (
                False,
                "TemplatePolicyWider",
                f"{opened} (NetworkPolicy {wanted['metadata']['name']} is in place)",
            )
    status["conditions"] = set_condition(conditions, phases.COND_NETWORK_ISOLATED, *verdict, now, view.generation)
    return actions


def _next_check(status: Mapping[str, Any], now: datetime, warn_at: datetime | None = None) -> ScheduleCheck | None:
    """The earliest future deadline among expiry, idleness and the expiry warning."""
    if phases.is_terminal(status["phase"]) or status["phase"] == Phase.TERMINATING:
        return None
    candidates = [
        (moment, reason)
        for moment, reason in (
            (Status(status).expiry_time, phases.REASON_TTL_EXPIRED),
            (Status(status).idle_deadline_time, phases.REASON_IDLE_TIMEOUT),
            (warn_at, REASON_EXPIRING_SOON),
        )
        if moment is not None and moment > now
    ]
    if not candidates:
        return None
    moment, reason = min(candidates)
    return ScheduleCheck(moment, reason)


def max_ttl_warning(
    before: Mapping[str, Any], resolved: Resolved, status: Mapping[str, Any], effective: EffectivePolicy
) -> Warn | None:
    """A Warning Event at once when a lowered maxTtl starts its grace period (or is lowered again in it)."""
    if resolved.pending_max_ttl is None or resolved.pending_max_ttl_at is None:
        return None
    recorded = Status(before).resolved
    if recorded.get("pendingMaxTtl") == format_duration(resolved.pending_max_ttl) and recorded.get("pendingMaxTtlAt"):
        return None  # warned already
    origin = effective.max_ttl.origin() if effective.max_ttl else ""
    grace = effective.max_ttl_grace.text if effective.max_ttl_grace else "1h (the default)"
    return Warn(
        REASON_MAX_TTL_LOWERED,
        f"maxTtl lowered to {format_duration(resolved.pending_max_ttl)} {origin}; it applies to this running "
        f"session after the grace period (spec.limits.maxTtlGracePeriod {grace}), at "
        f"{format_time(resolved.pending_max_ttl_at)}: the session now expires at {Status(status).expires_at} "
        f"(was {Status(before).expires_at}), and its sandbox and volumes are deleted then",
    )


def expiry_warning(
    before: Mapping[str, Any], status: dict[str, Any], now: datetime, lead: timedelta | None
) -> tuple[Warn | None, datetime | None]:
    """An ExpiringSoon Warning Event once per expiry time, ``lead`` before it; else when to check for it.

    Records what it warned about in ``status`` (``expiryWarnedFor``), so a restart or another pass never
    posts it twice, and a changed expiry (a longer ttl) is warned about again when its time comes.
    """
    expires = Status(status).expiry_time
    if lead is None or expires is None or phases.is_terminal(status["phase"]) or status["phase"] == Phase.TERMINATING:
        return None, None
    if Status(before).expiry_warned_time == expires:
        return None, None
    warn_at = expires - lead
    if now < warn_at:
        return None, warn_at
    if now >= expires:
        return None, None
    status["expiryWarnedFor"] = format_time(expires)
    left = format_duration(timedelta(seconds=max(int((expires - now).total_seconds()), 1)))
    return (
        Warn(
            REASON_EXPIRING_SOON,
            f"the session expires at {format_time(expires)} (in {left}): its sandbox and volumes are deleted then; "
            "raise spec.ttl (within the policy's maxTtl) to keep it longer",
        ),
        None,
    )


def reconcile_actions(
    session: Mapping[str, Any],
    claim: Mapping[str, Any] | None,
    sandbox: Mapping[str, Any] | None,
    now: datetime,
    *,
    warm_pool_exists: bool = True,
    effective: EffectivePolicy = EMPTY_POLICY,
    resolved: Resolved | None = None,
    violations: list[str] | None = None,
    fork: ForkBlocked | None = None,
    isolation: network.Isolation | None = None,
    expiry_lead: timedelta | None = DEFAULT_EXPIRY_WARNING,
    progress_written: datetime | None = None,
    identity: template_identity.TemplateIdentity | None = None,
) -> list[Action]:
    """Everything to do for ``session`` now, in order: claim and Sandbox work, status, next check.

    ``claim`` is whatever SandboxClaim carries the session's claim name (a foreign one is never touched),
    ``sandbox`` the Sandbox named in its status. ``violations`` come from policy_violations.violations; they block
    creating a claim, and stop a running one (phase Failed, reason PolicyViolation, the Sandbox suspended,
    claim and volumes kept) until the session or the policy is fixed. PolicyCompliant reports them.
    A fork comes here as fork.expand made it (the source's volumes as its own); ``fork`` says why one
    cannot have its claim yet, and then none is created. ``isolation`` (what is seen of the session's
    NetworkPolicy; None: leave networking alone) adds the NetworkPolicy of decisions.network and the
    NetworkIsolated condition. ``progress_written``: when the last progress of this provisioning session
    was written (progress_deferred_until). ``resolved``: the pass's own ``policy_resolve.resolve(session,
    effective, now)`` (None: resolved here, from ``effective``). ``identity``: what the claim's template gives
    its pods (decisions.template_identity; None: not known), said by condition PodIdentity.
    """
    now = utc(now)
    resolved = resolved if resolved is not None else resolve(session, effective, now)
    status = compute_status(
        session, claim, sandbox, now, warm_pool_exists, resolved=resolved, violations=violations, fork=fork
    )
    view = Session(session)
    owned = claim if claim is not None and is_owned_by(claim, view.uid) else None
    phase = status["phase"]
    actions: list[Action] = []
    if phase == Phase.EXPIRED:
        if owned is not None and not lifecycle.is_deleting(owned):
            reason = Status(status).condition(phases.COND_EXPIRED).reason or ""
            actions.append(DeleteClaim(owned["metadata"]["name"], reason or phases.REASON_TTL_EXPIRED))
    elif phase == Phase.FAILED and violations and owned is not None and not lifecycle.is_deleting(owned):
        actions += _stop_for_policy(owned, sandbox)
    elif phase == Phase.TERMINATING:
        # Deleted: no claim, at once. Garbage collection takes the claim only once the session object is
        # gone, and a finalizer that is not ours (which we never remove) can keep it for good, its sandbox
        # running outside every rule (issue 28 item 5). Deleted rather than suspended: the tenant asked for
        # the session to go, and its volumes would go with it anyway. A claim that lingers deleted (a
        # finalizer on it) has its Sandbox suspended: nothing of a deleted session runs on.
        if owned is not None and not lifecycle.is_deleting(owned):
            actions.append(DeleteClaim(owned["metadata"]["name"], phases.REASON_DELETING))
        elif owned is not None:
            actions += _stop_for_policy(owned, sandbox)
    elif phase not in (Phase.FAILED, Phase.TERMINATING):
        if claim is None and fork is None:
            create, _ = lifecycle.should_create_claim(
                {**session, "status": status},  # judge by this pass's phase, not the previous one
                False,
                now,
                resolved=resolved,
                warm_pool_exists=warm_pool_exists,
                violations=violations,
            )
            if create:
                manifest = desired.desired_claim(session, resolved, lifecycle.expires_at(session, resolved))
                actions.append(CreateClaim(manifest))
        elif owned is not None and not lifecycle.is_deleting(owned):
            actions += _claim_actions(session, owned, sandbox, status, now, resolved)
    if phase in (Phase.EXPIRED, Phase.TERMINATING):
        ended_with = hibernate.checkpoint_to_forget(session)
        if ended_with is not None:
            actions.append(ForgetCheckpoint(ended_with))
    if isolation is not None:
        actions += _isolation(session, owned, status, now, effective, isolation, sandbox)
    if identity is not None and owned is not None:
        verdict = template_identity.condition(identity)
        status["conditions"] = set_condition(
            status["conditions"], phases.COND_POD_IDENTITY, *verdict, now, view.generation
        )
    before = view.status
    lowered = max_ttl_warning(before, resolved, status, effective)
    soon, warn_at = expiry_warning(before, status, now, expiry_lead)
    actions += [w for w in (lowered, soon) if w is not None]
    check = _next_check(status, now, warn_at)
    if patch_changes(before, status):
        created = view.creation_time
        later = progress_deferred_until(before, status, now, progress_written, created)
        if later is None:
            actions.append(PatchStatus(status))
        elif check is None or later < check.at:
            check = ScheduleCheck(later, PROGRESS_CHECK)
    if check is not None:
        actions.append(check)
    return actions
