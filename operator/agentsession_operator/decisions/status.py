"""The session's status, computed from what is observed: the session, its claim, its Sandbox and the clock.

:func:`compute_status` returns a merge patch for ``status`` holding every field (None clears one), so
the same function serves the first write and every later one. Decisions live here too (phase Expired
when the TTL or the idle timeout ends the session), and actions.py turns them into actions.

Phases: Pending (no claim yet) -> Provisioning -> Ready <-> Suspended, and the terminal Expired (planned
end: reasons TTLExpired, IdleTimeout) and Failed (something the user must fix). Expired is sticky. Failed
is sticky when agent-sandbox reported a terminal reason (the claim cannot recover); Failed before any
claim exists (policy violation, name conflict) is re-evaluated, so fixing the spec or policy recovers it.

Over 500 lines on purpose: the phase machine and the bounds every written status must meet are one
decision (a status the API server refuses must never be computed), kept beside each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from agentsession_api import phases
from agentsession_api.activity import report_key
from agentsession_api.durations import format_duration
from agentsession_api.phases import IdleAction, Phase
from agentsession_api.timestamps import format_time, utc
from agentsession_api.views import Claim, Obj, Sandbox, Session
from agentsession_operator import constants
from agentsession_operator.decisions import hibernate, lifecycle
from agentsession_operator.decisions.conditions import is_true, set_condition
from agentsession_operator.decisions.desired import sandbox_operating_mode
from agentsession_operator.decisions.fork import ForkBlocked
from agentsession_operator.decisions.ownership import is_owned_by
from agentsession_operator.decisions.resolved import Resolved

__all__ = ["TERMINAL_CLAIM_REASONS", "bounded_status", "compute_status", "minimal_status", "set_condition"]

TERMINAL_CLAIM_REASONS: Final[dict[str, str]] = {
    "InvalidMetadata": (
        "the Pod labels or annotations were refused by agent-sandbox: pod label keys must use an allowed domain "
        "(agent-sandbox-config allowed-label-domains, default sandbox.users.io) and annotations must not use the "
        "kubernetes.io, k8s.io or agents.x-k8s.io domains; fix spec.podLabels / spec.podAnnotations"
    ),
    "EnvVarsInjectionRejected": (
        "agent-sandbox refused spec.env: the SandboxTemplate behind the warm pool must allow injection "
        "(envVarsInjectionPolicy Allowed or Overrides, and no envFrom in the target container); fix the template "
        "or drop spec.env"
    ),
    "VolumeClaimTemplatesError": (
        "agent-sandbox refused spec.volumeClaimTemplates: the SandboxTemplate must allow them "
        "(volumeClaimTemplatesPolicy Allowed or Overrides) and they must not clash with the template's volumes; "
        "fix the template or spec.volumeClaimTemplates"
    ),
    "InvalidConfiguration": (
        "agent-sandbox found the configuration invalid; check the SandboxTemplate behind the warm pool and the "
        "session spec"
    ),
    "PodFailed": "the sandbox Pod failed; read its logs and check the SandboxTemplate's image and command",
    "PodSucceeded": (
        "the sandbox Pod exited: a sandbox container must keep running; check the SandboxTemplate's command"
    ),
}
"""Reasons agent-sandbox never recovers from, with what the user should change."""
RECREATE_HINT: Final = "then delete and recreate the AgentSession"
EXPIRED_CLAIM_REASONS: Final = ("ClaimExpired", "SandboxExpired")
SUSPENDED_REASON: Final = "SandboxSuspended"
UPDATING_REASON: Final = "SandboxUpdating"
MAX_POD_IPS: Final = 8


@dataclass(frozen=True)
class Verdict:
    """The phase and why: what the Ready, Expired and Failed conditions report."""

    phase: str
    reason: str
    message: str


@dataclass(frozen=True)
class ClaimSeen:
    """What the claim and Sandbox say, reduced to the fields the status needs."""

    claim_name: str | None = None
    sandbox_name: str | None = None
    pod_ips: tuple[str, ...] = ()
    service_fqdn: str | None = None
    launch_type: str | None = None
    ready_status: str | None = None
    ready_reason: str = ""
    ready_message: str = ""
    suspended: bool = False
    sandbox_lags: bool = False
    """agent-sandbox has not acted on the Sandbox's current spec yet (see :func:`sandbox_lags`)."""


def sandbox_lags(sandbox: Mapping[str, Any] | None) -> bool:
    """The Sandbox's Ready condition is older than its spec (observedGeneration < generation).

    Why it matters: a warm-pool adoption rewrites the Sandbox (generation 2) while its Ready is still the
    pool's (of generation 1), and agent-sandbox's claim can say Ready before it relabels the Pod with
    ``agents.x-k8s.io/claim-uid``, the label the session's NetworkPolicy selects; until then only the
    template's policy applies (closed), and a client connecting is refused. agent-sandbox relabels the
    Pod before it writes the Ready of the new generation. Without a generation or an observedGeneration
    (not agent-sandbox v1.0) nothing is known to lag.
    """
    if sandbox is None:
        return False
    view = Sandbox(sandbox)
    generation = view.generation
    observed = view.condition(phases.COND_READY).observed_generation
    return generation is not None and isinstance(observed, int) and observed < generation


def observe(claim: Mapping[str, Any] | None, sandbox: Mapping[str, Any] | None) -> ClaimSeen:
    """Read claim and Sandbox status. A Sandbox whose name is not the claim's sandbox is ignored."""
    if claim is None:
        return ClaimSeen()
    owned = Claim(claim)
    bound = owned.bound
    sandbox_name = owned.bound_sandbox
    if sandbox is not None and (sandbox_name is None or Sandbox(sandbox).name != sandbox_name):
        sandbox = None
    running = Sandbox(sandbox)
    ready = owned.condition(phases.COND_READY)
    launch = running.labels.get(constants.SANDBOX_LAUNCH_TYPE_LABEL) if sandbox else None
    claim_name = owned.name or None
    if launch not in ("warm", "cold"):
        launch = None if sandbox_name is None else ("cold" if sandbox_name == claim_name else "warm")
    return ClaimSeen(
        claim_name=claim_name,
        sandbox_name=sandbox_name,
        pod_ips=tuple(bound.get("podIPs") or running.pod_ips)[:MAX_POD_IPS],
        service_fqdn=running.service_fqdn or bound.get("serviceFQDN") or None,
        launch_type=launch,
        ready_status=ready.status,
        ready_reason=ready.reason or "",
        ready_message=ready.message or "",
        suspended=sandbox is not None and sandbox_operating_mode(sandbox) == constants.OPERATING_MODE_SUSPENDED,
        sandbox_lags=sandbox_lags(sandbox),
    )


def _sticky(session: Mapping[str, Any]) -> Verdict | None:
    """The verdict to keep when the session already reached a terminal phase."""
    view = Session(session)
    if view.phase == Phase.EXPIRED:
        cond = view.condition(phases.COND_EXPIRED)
        return Verdict(Phase.EXPIRED, cond.reason or phases.REASON_TTL_EXPIRED, cond.message or "")
    if view.phase == Phase.FAILED:
        cond = view.condition(phases.COND_FAILED)
        if cond.reason in TERMINAL_CLAIM_REASONS:
            return Verdict(Phase.FAILED, cond.reason, cond.message or "")
    return None


def _claim_verdict(session: Mapping[str, Any], seen: ClaimSeen, warm_pool_exists: bool, resolved: Resolved) -> Verdict:
    """Phase from an owned claim's Ready condition and the Sandbox's operating mode."""
    reason = seen.ready_reason
    if reason in TERMINAL_CLAIM_REASONS:
        said = f" (agent-sandbox: {seen.ready_message})" if seen.ready_message else ""
        return Verdict(Phase.FAILED, reason, f"{TERMINAL_CLAIM_REASONS[reason]}{said}; {RECREATE_HINT}")
    if reason in EXPIRED_CLAIM_REASONS:
        return Verdict(Phase.EXPIRED, phases.REASON_TTL_EXPIRED, f"agent-sandbox ended the sandbox ({reason})")
    if seen.suspended or reason == SUSPENDED_REASON:
        if Session(session).suspend:
            return Verdict(Phase.SUSPENDED, phases.REASON_SUSPEND_REQUESTED, "suspended by spec.suspend")
        if resolved.idle_action in phases.SUSPENDING_IDLE_ACTIONS:
            return Verdict(
                Phase.SUSPENDED,
                phases.REASON_IDLE_TIMEOUT,
                "suspended after the idle timeout; client activity resumes it",
            )
        return Verdict(Phase.SUSPENDED, SUSPENDED_REASON, seen.ready_message or "the Sandbox is suspended")
    if seen.ready_status == "True" and seen.sandbox_lags and Session(session).phase != Phase.READY:
        # Only on the way to Ready: a spec change of a Ready session's Sandbox must not flap it.
        return Verdict(
            Phase.PROVISIONING,
            UPDATING_REASON,
            f"Sandbox {seen.sandbox_name} is ready but agent-sandbox has not applied its latest spec yet (after a "
            "warm-pool adoption: the Pod's label that the session's NetworkPolicy selects)",
        )
    if seen.ready_status == "True":
        where = f" at {seen.pod_ips[0]}" if seen.pod_ips else ""
        return Verdict(Phase.READY, "SandboxReady", f"Sandbox {seen.sandbox_name} is ready{where}")
    if reason == phases.REASON_WARM_POOL_NOT_FOUND or not warm_pool_exists:
        return Verdict(Phase.PENDING, phases.REASON_WARM_POOL_NOT_FOUND, _pool_not_found(session, resolved))
    if _was_ready(session):
        # Not "provisioning" as for a new session: a running sandbox stopped answering its readiness.
        said = f" (agent-sandbox: {seen.ready_message})" if seen.ready_message else ""
        return Verdict(
            Phase.PROVISIONING,
            phases.REASON_SANDBOX_UNAVAILABLE,
            f"Sandbox {seen.sandbox_name or ''} was ready and is not any more{said}: its runtime exited or its "
            "pod is restarting or gone; the session is Ready again once the sandbox is",
        )
    return Verdict(
        Phase.PROVISIONING,
        reason or "SandboxNotReady",
        seen.ready_message or "waiting for agent-sandbox to provide a ready Sandbox",
    )


def _unclaimed_verdict(
    session: Mapping[str, Any],
    warm_pool_exists: bool,
    resolved: Resolved,
    violations: list[str] | None,
    fork: ForkBlocked | None = None,
) -> Verdict:
    """Phase while no claim exists yet (or it was deleted): why creation waits (lifecycle decides)."""
    waiting = lifecycle.why_creation_waits(resolved, warm_pool_exists=warm_pool_exists, violations=violations)
    if waiting == phases.REASON_POLICY_VIOLATION:
        return Verdict(
            Phase.FAILED, phases.REASON_POLICY_VIOLATION, "refused by policy: " + "; ".join(violations or [])
        )
    if fork is not None:  # a fork that cannot be made yet (or at all): before the pool, which it may inherit
        return Verdict(fork.phase, fork.reason, fork.message)
    if waiting == phases.REASON_NO_WARM_POOL:
        return Verdict(
            Phase.PENDING,
            phases.REASON_NO_WARM_POOL,
            "spec.warmPoolRef is not set and no AgentSessionPolicy gives a default warm pool; delete and recreate "
            "the AgentSession with spec.warmPoolRef.name, or add a policy with defaults.warmPoolRef",
        )
    if waiting == phases.REASON_WARM_POOL_NOT_FOUND:
        return Verdict(Phase.PENDING, phases.REASON_WARM_POOL_NOT_FOUND, _pool_not_found(session, resolved))
    return Verdict(Phase.PENDING, phases.REASON_CLAIM_PENDING, "creating the SandboxClaim")


def _was_ready(session: Mapping[str, Any]) -> bool:
    """Ready until now, or already reported as having lost its sandbox (and not Ready since)."""
    view = Session(session)
    return view.phase == Phase.READY or view.condition(phases.COND_READY).reason == phases.REASON_SANDBOX_UNAVAILABLE


def _pool_not_found(session: Mapping[str, Any], resolved: Resolved) -> str:
    return f"SandboxWarmPool {resolved.warm_pool} not found in namespace {Session(session).namespace}"


def _verdict(
    session: Mapping[str, Any],
    claim: Mapping[str, Any] | None,
    seen: ClaimSeen,
    now: datetime,
    warm_pool_exists: bool,
    resolved: Resolved,
    violations: list[str] | None,
    fork: ForkBlocked | None = None,
) -> Verdict:
    if lifecycle.is_deleting(session):
        return Verdict(Phase.TERMINATING, phases.REASON_DELETING, "the AgentSession is being deleted")
    sticky = _sticky(session)
    if sticky is not None:
        return sticky
    expiry = lifecycle.expires_at(session, resolved)
    if expiry is not None and now >= expiry:
        ttl = format_duration(resolved.ttl) if resolved.ttl is not None else "?"
        message = f"the TTL of {ttl} ended at {format_time(expiry)}"
        if resolved.ttl is not None and not resolved.ttl and Session(session).lineage:
            # A fork whose source's data had used up its maxTtl (policy.lineage_max_ttl): say so.
            message += " (a fork ends when its source's data would: see the PolicyCompliant condition)"
        return Verdict(Phase.EXPIRED, phases.REASON_TTL_EXPIRED, message)
    if claim is not None and seen.claim_name is None:
        return Verdict(
            Phase.FAILED,
            phases.REASON_CLAIM_CONFLICT,
            f"a SandboxClaim named {Obj(claim).name} already exists and is not owned by this AgentSession; "
            "delete that claim or recreate the session under another name",
        )
    if seen.claim_name is not None and violations:
        # A running session that breaks a policy (it arrived after admission, or the policy changed) is
        # stopped: suspended with its volumes kept, not deleted. Not sticky: fixing either resumes it.
        return Verdict(
            Phase.FAILED,
            phases.REASON_POLICY_VIOLATION,
            "stopped by policy (the sandbox is suspended, its volumes kept): " + "; ".join(violations),
        )
    if seen.claim_name is not None:
        return _claim_verdict(session, seen, warm_pool_exists, resolved)
    return _unclaimed_verdict(session, warm_pool_exists, resolved, violations, fork)


def _activity_fields(
    session: Mapping[str, Any], verdict: Verdict, now: datetime
) -> tuple[str | None, str | None, datetime | None, datetime | None]:
    """lastActivityTime and busyUntil, as written and as times; becoming Ready, or a resume asked via
    spec.suspend, counts as activity."""
    view = Session(session)
    last, last_time = view.last_activity_time, view.last_activity
    ready_before = view.condition(phases.COND_READY)
    became_ready = verdict.phase == Phase.READY and ready_before.status != "True"
    resumed = (
        not view.suspend and view.phase == Phase.SUSPENDED and ready_before.reason == phases.REASON_SUSPEND_REQUESTED
    )
    if became_ready or resumed:
        last_time = (max(last_time, now) if last_time else now).replace(microsecond=0)  # as written
        last = format_time(last_time)
    return last, view.busy_until, last_time, view.busy_until_time


def compute_status(
    session: Mapping[str, Any],
    claim: Mapping[str, Any] | None,
    sandbox: Mapping[str, Any] | None,
    now: datetime,
    warm_pool_exists: bool = True,
    *,
    resolved: Resolved,
    violations: list[str] | None = None,
    fork: ForkBlocked | None = None,
) -> dict[str, Any]:
    """The full status merge patch for ``session`` given what is observed now.

    ``claim`` is the SandboxClaim with the session's claim name (owned or not: a foreign one is a
    conflict), ``sandbox`` the Sandbox named in the claim's status. ``resolved`` is the settings in force
    (policy_resolve.resolve under the session's policies: never defaulted, which would drop them); pass
    ``violations`` (from policy_violations.violations) to get a PolicyCompliant condition, and ``fork`` (from
    fork.plan_fork) when a fork without a claim cannot have one yet.
    """
    now = utc(now)
    view = Session(session)
    current = view.status
    generation = view.generation
    owned = claim if claim is not None and is_owned_by(claim, view.uid) else None
    seen = observe(owned, sandbox)
    verdict = _verdict(session, claim, seen, now, warm_pool_exists, resolved, violations, fork)

    last_activity, busy_until, last_time, busy_time = _activity_fields(session, verdict, now)
    deadline = lifecycle.idle_deadline(last_time, busy_time, resolved.idle_timeout, resolved.max_idle_timeout)
    if (
        verdict.phase == Phase.READY
        and deadline is not None
        and now >= deadline
        and resolved.idle_action == IdleAction.DELETE
        and not view.suspend
    ):
        verdict = Verdict(
            Phase.EXPIRED,
            phases.REASON_IDLE_TIMEOUT,
            f"no client activity for {format_duration(resolved.idle_timeout) if resolved.idle_timeout else '?'} "
            f"(idle since {last_activity})",
        )

    conditions = _conditions(current.get("conditions"), verdict, seen, claim, now, generation, violations)
    conditions = _hibernate_condition(conditions, resolved, now, generation, view.hibernation)
    terminal = verdict.phase in (Phase.EXPIRED, Phase.TERMINATING)
    ready_at = view.ready_at or (format_time(now) if verdict.phase == Phase.READY else None)
    expiry = lifecycle.expires_at(session, resolved)
    keep = current if terminal else {}
    return {
        "phase": verdict.phase,
        "claimName": seen.claim_name or keep.get("claimName"),
        "sandboxName": seen.sandbox_name or keep.get("sandboxName"),
        "podName": seen.sandbox_name or keep.get("podName"),
        "podIPs": list(seen.pod_ips) if seen.pod_ips and not terminal else None,
        "serviceFQDN": seen.service_fqdn if not terminal else None,
        "launchType": seen.launch_type or keep.get("launchType"),
        "expiresAt": format_time(expiry) if expiry else None,
        "readyAt": ready_at,
        "lastActivityTime": last_activity,
        "busyUntil": busy_until,
        "idleDeadline": format_time(deadline) if deadline and not terminal else None,
        "observedGeneration": generation,
        "resolved": resolved.to_status(),
        "conditions": conditions,
    }


def _conditions(
    current: list[dict[str, Any]] | None,
    verdict: Verdict,
    seen: ClaimSeen,
    claim: Mapping[str, Any] | None,
    now: datetime,
    generation: int | None,
    violations: list[str] | None,
) -> list[dict[str, Any]]:
    """Ready, ClaimCreated, Expired, Failed and (when violations were given) PolicyCompliant."""
    ready = verdict.phase == Phase.READY
    conditions = set_condition(current, phases.COND_READY, ready, verdict.reason, verdict.message, now, generation)
    if seen.claim_name is not None:
        created = (True, "ClaimExists", f"SandboxClaim {seen.claim_name} exists")
    elif claim is not None:
        created = (False, phases.REASON_CLAIM_CONFLICT, verdict.message)
    elif is_true(current, phases.COND_CLAIM_CREATED) or verdict.phase == Phase.EXPIRED:
        created = (False, "ClaimGone", "the SandboxClaim no longer exists")
    else:
        created = (False, "NotCreated", verdict.message)
    conditions = set_condition(conditions, phases.COND_CLAIM_CREATED, *created, now, generation)
    if verdict.phase == Phase.TERMINATING:
        # Expired and Failed stay as they were: why the session ended, and whether it was finished before
        # its deletion (decisions.quota: a finished one never comes back to hold a place).
        return _policy_condition(conditions, now, generation, violations)
    expired = verdict.phase == Phase.EXPIRED
    conditions = set_condition(
        conditions,
        phases.COND_EXPIRED,
        expired,
        verdict.reason if expired else "NotExpired",
        verdict.message if expired else "the session is within its TTL and idle timeout",
        now,
        generation,
    )
    failed = verdict.phase == Phase.FAILED
    conditions = set_condition(
        conditions,
        phases.COND_FAILED,
        failed,
        verdict.reason if failed else "NoFailure",
        verdict.message if failed else "",
        now,
        generation,
    )
    return _policy_condition(conditions, now, generation, violations)


def _hibernate_condition(
    conditions: list[dict[str, Any]],
    resolved: Resolved,
    now: datetime,
    generation: int | None,
    hibernation: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Hibernated, only while idleAction Hibernate is in force: from the last hibernation's record
    (``status.hibernation``, written when the operator checkpointed or fell back), else False with
    HibernateUnavailable (no node agent configured: it suspends as Suspend)."""
    if resolved.idle_action != IdleAction.HIBERNATE:
        return [c for c in conditions if c.get("type") != phases.COND_HIBERNATED]
    if resolved.hibernate_forbidden_by and not (hibernation or {}).get("hibernated"):
        return set_condition(
            conditions,
            phases.COND_HIBERNATED,
            False,
            phases.REASON_HIBERNATE_FORBIDDEN,
            hibernate.forbidden_message(resolved.hibernate_forbidden_by),
            now,
            generation,
        )
    if hibernation:
        return set_condition(
            conditions,
            phases.COND_HIBERNATED,
            bool(hibernation.get("hibernated")),
            str(hibernation.get("reason") or phases.REASON_HIBERNATE_UNAVAILABLE),
            str(hibernation.get("message") or ""),
            now,
            generation,
        )
    return set_condition(
        conditions,
        phases.COND_HIBERNATED,
        False,
        phases.REASON_HIBERNATE_UNAVAILABLE,
        phases.HIBERNATE_UNAVAILABLE_MESSAGE,
        now,
        generation,
    )


def _policy_condition(
    conditions: list[dict[str, Any]], now: datetime, generation: int | None, violations: list[str] | None
) -> list[dict[str, Any]]:
    if violations is not None:
        conditions = set_condition(
            conditions,
            phases.COND_POLICY_COMPLIANT,
            not violations,
            phases.REASON_POLICY_VIOLATION if violations else "Compliant",
            "; ".join(violations) if violations else "the session meets every applicable AgentSessionPolicy",
            now,
            generation,
        )
    return conditions


# --- Bounds: a status the API server refuses must never be written ----------------------------------
STRING_BOUNDS: Final[dict[str, int]] = {
    "claimName": 63,
    "sandboxName": 253,
    "podName": 253,
    "serviceFQDN": 512,
}
"""The schema's maxLength of each status string copied from other objects (api/agentsession_api/types_session.py)."""
POD_IP_MAX: Final = 64
CONDITION_REASON_MAX: Final = 1024
CONDITION_MESSAGE_MAX: Final = 32_768
MINIMAL_FIELDS: Final = (
    "phase",
    "lastActivityTime",
    "busyUntil",
    "lastActivityReport",
    "idleDeadline",
    "expiresAt",
    "observedGeneration",
    "lineage",
)
"""What a fallback write keeps when the API server refused the full status: the phase and the idle clock,
and a fork's lineage (refused, the pass fails before any claim: a fork is never made without it)."""


def _clip(value: Any, limit: int) -> Any:
    return value[: limit - 1] + "…" if isinstance(value, str) and len(value) > limit else value


def bounded_status(patch: Mapping[str, Any]) -> dict[str, Any]:
    """``patch`` with every string that comes from another object (claim, Sandbox, agent-sandbox's
    messages, the activity annotation) cut to the schema's bound, so no outside value can make the
    API server refuse the write."""
    result = dict(patch)
    for key, limit in STRING_BOUNDS.items():
        if key in result:
            result[key] = _clip(result[key], limit)
    if result.get("podIPs"):
        result["podIPs"] = [ip for ip in result["podIPs"] if isinstance(ip, str) and len(ip) <= POD_IP_MAX][
            :MAX_POD_IPS
        ] or None
    if isinstance(result.get("lastActivityReport"), str):
        result["lastActivityReport"] = report_key(result["lastActivityReport"])
    if result.get("conditions"):
        result["conditions"] = [
            {
                **cond,
                "reason": _clip(cond.get("reason"), CONDITION_REASON_MAX),
                "message": _clip(cond.get("message"), CONDITION_MESSAGE_MAX),
            }
            for cond in result["conditions"]
        ]
    return result


def minimal_status(patch: Mapping[str, Any]) -> dict[str, Any]:
    """The fallback write after a refusal: :data:`MINIMAL_FIELDS` only, so the phase and the idle clock
    (what idle reaping reads) keep moving whatever else the API server objected to."""
    return {key: patch[key] for key in MINIMAL_FIELDS if key in patch}
