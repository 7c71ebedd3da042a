"""What status says: phases (and which of them are terminal), condition types, reasons, idle actions.

The enums are ``str`` subclasses: their members compare equal to the strings in an object's status, so
code reading raw dicts and code reading :mod:`agentsession_api.types` models use the same names.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Phase(StrEnum):
    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    READY = "Ready"
    SUSPENDED = "Suspended"
    EXPIRED = "Expired"
    FAILED = "Failed"
    TERMINATING = "Terminating"


TERMINAL_PHASES: Final = frozenset({Phase.EXPIRED, Phase.FAILED})
"""A session in one of these never becomes Ready by waiting: it is finished (it does not count against
``cleanup.maxSessionsPerLabel``) and no claim is created for it."""


def is_terminal(phase: str | None) -> bool:
    """True for Expired and Failed."""
    return phase in TERMINAL_PHASES


class IdleAction(StrEnum):
    DELETE = "Delete"
    SUSPEND = "Suspend"
    HIBERNATE = "Hibernate"
    """Suspend keeping the sandbox's memory (a gVisor checkpoint, issue 33). Until the operator can take
    checkpoints it suspends exactly as Suspend, and condition Hibernated (False, HibernateUnavailable) says why."""


SUSPENDING_IDLE_ACTIONS: Final = frozenset({IdleAction.SUSPEND, IdleAction.HIBERNATE})
"""Idle actions that stop the pod and keep the session (its volumes; activity resumes it)."""


COND_READY: Final = "Ready"
COND_CLAIM_CREATED: Final = "ClaimCreated"
COND_POLICY_COMPLIANT: Final = "PolicyCompliant"
COND_EXPIRED: Final = "Expired"
COND_FAILED: Final = "Failed"
COND_HIBERNATED: Final = "Hibernated"
"""Only while idleAction Hibernate is in force: whether an idle suspend keeps the sandbox's memory."""
COND_POD_IDENTITY: Final = "PodIdentity"
"""Whether the SandboxTemplate behind the session's claim gives its pods the identity token the clients check
before they send anything (issue 51 item 1): False names the missing volume and the fix."""
COND_NETWORK_ISOLATED: Final = "NetworkIsolated"
"""True once the session's own NetworkPolicy (ingress from its namespace's clients only, egress from the
policies) is in place for its sandbox."""

REASON_TTL_EXPIRED: Final = "TTLExpired"
REASON_IDLE_TIMEOUT: Final = "IdleTimeout"
REASON_WARM_POOL_NOT_FOUND: Final = "WarmPoolNotFound"
REASON_NO_WARM_POOL: Final = "NoWarmPool"
REASON_POLICY_VIOLATION: Final = "PolicyViolation"
REASON_CLAIM_CONFLICT: Final = "ClaimConflict"
REASON_CLAIM_PENDING: Final = "ClaimPending"
REASON_SUSPEND_REQUESTED: Final = "SuspendRequested"
REASON_DELETING: Final = "Deleting"
REASON_HIBERNATE_UNAVAILABLE: Final = "HibernateUnavailable"
HIBERNATE_UNAVAILABLE_MESSAGE: Final = (
    "idleAction Hibernate suspends as Suspend (the workspace volume kept, processes not): this operator "
    "cannot checkpoint sandboxes yet (no node agent; issue 33)"
)

# Hibernate (issue 33): why an idle session on idleAction Hibernate suspended without its memory, or that it kept it.
REASON_CHECKPOINTED: Final = "Checkpointed"
REASON_NOT_GVISOR: Final = "NotGVisor"
REASON_NODE_AGENT_UNAVAILABLE: Final = "NodeAgentUnavailable"
REASON_CHECKPOINT_FAILED: Final = "CheckpointFailed"
REASON_CHECKPOINT_TOO_LARGE: Final = "CheckpointTooLarge"
REASON_RESTORE_FAILED: Final = "RestoreFailed"
REASON_HIBERNATE_FORBIDDEN: Final = "HibernateForbidden"
"""An AgentSessionPolicy has spec.limits.allowHibernate false: the session suspends as Suspend."""
REASON_HIBERNATED_SIZE_EXCEEDED: Final = "HibernatedSizeExceeded"
"""The namespace's hibernated sessions keep a policy's limits.maxHibernatedSize of checkpoints already (or
this one would pass it): the session suspends as Suspend."""
REASON_RESTORED: Final = "Restored"
REASON_POD_SPEC_CHANGED: Final = "PodSpecChanged"
"""The Sandbox's pod spec changed while the session slept: it woke fresh (workspace kept, processes not), since
runsc would restore the old processes into the new spec without applying it (issue 49 item 7)."""
HIBERNATE_FALLBACK_REASONS: Final = frozenset(
    {
        REASON_HIBERNATE_UNAVAILABLE,
        REASON_NOT_GVISOR,
        REASON_NODE_AGENT_UNAVAILABLE,
        REASON_CHECKPOINT_FAILED,
        REASON_CHECKPOINT_TOO_LARGE,
        REASON_RESTORE_FAILED,
        REASON_POD_SPEC_CHANGED,
        REASON_HIBERNATE_FORBIDDEN,
        REASON_HIBERNATED_SIZE_EXCEEDED,
    }
)
"""Reasons of condition Hibernated False: the session suspended as Suspend (workspace kept, processes not)."""

# Forks (spec.forkFrom): why a fork has no claim yet. Waiting reasons keep it Pending; the others are
# Failed (not sticky: fixing the source or the storage class lets the next pass go on).
REASON_SOURCE_NOT_FOUND: Final = "SourceNotFound"
REASON_SOURCE_NOT_READY: Final = "SourceNotReady"
REASON_SOURCE_FINISHED: Final = "SourceFinished"
REASON_SOURCE_WITHOUT_VOLUMES: Final = "SourceWithoutVolumes"
REASON_VOLUME_COPY_UNSUPPORTED: Final = "VolumeCopyUnsupported"
REASON_LINEAGE_TOO_LONG: Final = "LineageTooLong"
FORK_FAILURE_REASONS: Final = frozenset(
    {
        REASON_SOURCE_NOT_FOUND,
        REASON_SOURCE_FINISHED,
        REASON_SOURCE_WITHOUT_VOLUMES,
        REASON_VOLUME_COPY_UNSUPPORTED,
        REASON_LINEAGE_TOO_LONG,
    }
)
REASON_SANDBOX_UNAVAILABLE: Final = "SandboxUnavailable"
"""A session that was Ready lost its sandbox's readiness (its runtime exited, its pod restarts or went):
phase Provisioning until the sandbox is ready again."""
