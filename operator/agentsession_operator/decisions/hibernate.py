"""Hibernate (issue 33): whether an idle session's suspend keeps its memory, pure.

The flow the I/O shell drives: ``before_checkpoint`` (is this session one whose sandbox can be
checkpointed at all: a gVisor template, a node agent on its node), then the node agent's checkpoint,
then ``after_checkpoint`` (did it work, is the image within the bound). Either way the session then
suspends; a verdict that does not hibernate is a plain Suspend with its reason on condition Hibernated.
On wake, ``restore_annotations`` is what the Sandbox's pod template carries so the shim restores it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from agentsession_api import names, phases
from agentsession_api.node_agent import is_valid_checkpoint_name
from agentsession_api.timestamps import format_time, parse_time
from agentsession_api.views import Claim, Obj, Sandbox, Session
from agentsession_operator.decisions.resolved import Resolved

GVISOR_RUNTIME_CLASSES = frozenset({"gvisor"})
"""RuntimeClasses whose handler is runsc (checkpointable by the node agent)."""

DEFAULT_MAX_CHECKPOINT_BYTES = 512 * 1024 * 1024
"""The bound on one checkpoint image when no policy sets one: larger ones are deleted, the session suspends."""


@dataclass(frozen=True)
class HibernateVerdict:
    hibernate: bool
    reason: str
    message: str


@dataclass(frozen=True)
class CheckpointResult:
    """What the node agent answered: ``ok`` with the image's size, or why not (``error``)."""

    ok: bool
    size_bytes: int = 0
    error: str = ""
    not_gvisor: bool = False
    """The agent found the pod but not under runsc (the template's runtime is not gVisor)."""
    measured_bytes: int | None = None
    """The agent refused before writing: the sandbox holds this much memory, over the bound it was sent."""


def hibernates(resolved: Resolved, suspend_requested: bool) -> bool:
    """Whether an idle suspend is a Hibernate: idleAction Hibernate in force, no policy forbidding it
    (limits.allowHibernate false: a plain Suspend, condition Hibernated False HibernateForbidden), and not
    spec.suspend (the tenant asked for a plain suspend)."""
    return (
        resolved.idle_action == phases.IdleAction.HIBERNATE
        and not resolved.hibernate_forbidden_by
        and not suspend_requested
    )


def forbidden_message(forbidden_by: str) -> str:
    return (
        f"suspends as Suspend (workspace kept, processes not): {forbidden_by} forbids Hibernate "
        "(spec.limits.allowHibernate: false)"
    )


def max_bytes_for(operator_bound: int, policy_bound: int | None) -> int:
    """The bound on this session's image: the operator's, lowered by its policies' maxCheckpointSize."""
    return operator_bound if policy_bound is None else min(operator_bound, policy_bound)


def checkpoint_name(session_name: str, session_uid: str, taken_at: str = "") -> str:
    """The image's name under ``<root>/<namespace>/``, a DNS label: one per hibernation of one session (issue
    49 item 7), ``<name>-<UID digest>-<digest of UID and takenAt>``. The wake recomputes it from the
    session's name, UID and recorded ``takenAt``, so an older image of the session (a delete that missed a
    node) is never named again, and the sweep takes it. Without ``taken_at``: the one name every hibernation
    had before (images taken by an older operator)."""
    digest = hashlib.sha256(session_uid.encode()).hexdigest()[:10]
    if not taken_at:
        return f"{session_name[:52].rstrip('-')}-{digest}"
    taken = hashlib.sha256(f"{session_uid}@{taken_at}".encode()).hexdigest()[:8]
    return f"{checkpoint_prefix(session_name, session_uid)}{taken}"


def checkpoint_prefix(session_name: str, session_uid: str) -> str:
    """What every image of one session's hibernations begins with (the sweep keeps them while one is being
    taken: the status names it only after)."""
    digest = hashlib.sha256(session_uid.encode()).hexdigest()[:10]
    return f"{session_name[:43].rstrip('-')}-{digest}-"


def own_checkpoints(session: Mapping[str, Any]) -> tuple[str, ...]:
    """The names the session's recorded hibernation may have: this one's (from its takenAt) and, for an
    image an older operator took, the one name of old."""
    view = Session(session)
    name, uid = view.name, view.uid
    taken_at = view.hibernation.get("takenAt")
    names_ = [checkpoint_name(name, uid, taken_at)] if isinstance(taken_at, str) and taken_at else []
    return (*names_, checkpoint_name(name, uid))


def runtime_class_of(template: dict[str, Any] | None) -> str | None:
    """The SandboxTemplate's pod runtimeClassName, or None (the cluster's default runtime)."""
    if not template:
        return None
    value = Obj(Obj(template).spec.get("podTemplate")).spec.get("runtimeClassName")
    return value if isinstance(value, str) and value else None


def template_verdict(
    runtime_class: str | None, gvisor_classes: frozenset[str] = GVISOR_RUNTIME_CLASSES
) -> HibernateVerdict | None:
    """A template known not to be gVisor: the fallback; None when it may be checkpointed."""
    if runtime_class in gvisor_classes:
        return None
    return HibernateVerdict(
        False,
        phases.REASON_NOT_GVISOR,
        f"suspended as Suspend (workspace kept, processes not): the template's runtimeClassName "
        f"{runtime_class or '(default)'!s} is not gVisor, whose checkpoints hibernation needs",
    )


def before_checkpoint(agent_reachable: bool) -> HibernateVerdict:
    """Whether to ask the node agent for a checkpoint at all; a False verdict suspends as Suspend."""
    if not agent_reachable:
        return HibernateVerdict(
            False,
            phases.REASON_NODE_AGENT_UNAVAILABLE,
            "suspended as Suspend (workspace kept, processes not): no node agent is Ready",
        )
    return HibernateVerdict(True, phases.REASON_CHECKPOINTED, "checkpoint requested")


def within_budget(used: int, size: int, budget: int | None, policy: str = "") -> HibernateVerdict | None:
    """None when ``size`` more bytes keep the namespace's hibernated sessions within ``budget`` (a policy's
    limits.maxHibernatedSize; ``used``: what they keep now), else the fallback saying so. Asked with size 0
    before a checkpoint, with the image's size after."""
    if budget is None or (used + size <= budget and used < budget):
        return None
    where = f" (AgentSessionPolicy {policy})" if policy else ""
    taken = f"; this checkpoint ({size} bytes) would pass it and was deleted" if size else ""
    return HibernateVerdict(
        False,
        phases.REASON_HIBERNATED_SIZE_EXCEEDED,
        f"suspended as Suspend (workspace kept, processes not): the namespace's hibernated sessions keep "
        f"{used} bytes of checkpoints, limits.maxHibernatedSize{where} is {budget}{taken}",
    )


def after_checkpoint(result: CheckpointResult, max_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES) -> HibernateVerdict:
    """The node agent's answer judged: hibernated, or a plain Suspend saying why (the image then deleted)."""
    if result.not_gvisor:
        verdict = template_verdict(None)
        assert verdict is not None
        return HibernateVerdict(False, verdict.reason, f"{verdict.message} ({result.error[:200]})")
    if result.measured_bytes is not None:
        return HibernateVerdict(
            False,
            phases.REASON_CHECKPOINT_TOO_LARGE,
            f"suspended as Suspend (workspace kept, processes not): the sandbox holds {result.measured_bytes} "
            f"bytes of memory, over the bound of {max_bytes} bytes on its checkpoint: not checkpointed, nothing "
            "was written",
        )
    if not result.ok:
        return HibernateVerdict(
            False,
            phases.REASON_CHECKPOINT_FAILED,
            f"suspended as Suspend (workspace kept, processes not): the checkpoint failed: {result.error[:300]}",
        )
    if result.size_bytes > max_bytes:
        return HibernateVerdict(
            False,
            phases.REASON_CHECKPOINT_TOO_LARGE,
            f"suspended as Suspend (workspace kept, processes not): the checkpoint ({result.size_bytes} bytes) "
            f"exceeds the bound of {max_bytes} bytes and was deleted",
        )
    return HibernateVerdict(
        True,
        phases.REASON_CHECKPOINTED,
        f"hibernated: checkpoint of {result.size_bytes} bytes; the next use restores the sandbox's processes",
    )


def checkpoint_age_seconds(taken_at: datetime | None, now: datetime) -> float | None:
    """How old the stored checkpoint is (status), None when there is none."""
    if taken_at is None:
        return None
    return max(0.0, (now - taken_at).total_seconds())


def restore_annotations(checkpoint: str | None) -> dict[str, str]:
    """The pod annotations of a waking session's Sandbox: restore from its checkpoint, or none."""
    if not checkpoint or not is_valid_checkpoint_name(checkpoint):
        return {}
    return {names.ANNOTATION_RESTORE_FROM: checkpoint}


def user_names_restore(pod_annotations: dict[str, str] | None) -> bool:
    """True when a session's own spec tries to set the restore annotation (only the operator may)."""
    return bool(pod_annotations) and names.ANNOTATION_RESTORE_FROM in (pod_annotations or {})


def record(
    verdict: HibernateVerdict,
    checkpoint: str | None,
    size_bytes: int | None,
    now: datetime,
    pod_spec_digest: str = "",
) -> dict[str, Any]:
    """``status.hibernation`` after a hibernate: the kept checkpoint, or why there is none."""
    kept = verdict.hibernate and checkpoint is not None
    return {
        "hibernated": kept,
        "reason": verdict.reason,
        "message": verdict.message,
        "checkpoint": checkpoint if kept else None,
        "sizeBytes": size_bytes if kept else None,
        "takenAt": format_time(now) if kept else None,
        "podSpecDigest": (pod_spec_digest or None) if kept else None,
    }


CACHED_POD_SPEC_DIGEST: Final = f"{names.GROUP}/podSpecDigest"
"""Where the operator's cached copy of a Sandbox keeps :func:`pod_spec_digest` (kube/cache.py drops the pod
template itself: tenants size it). A key no Sandbox spec has (it holds a slash)."""


def pod_spec_digest(sandbox: Mapping[str, Any] | None) -> str:
    """SHA-256 of the Sandbox's pod spec (canonical JSON): what a checkpoint was taken from, and what its wake
    would restore into. runsc restores with spec validation at "warning" (a restored pod's cgroup parent always
    differs), so a spec changed in between (tightened) would not apply to the restored processes. A cached
    copy carries it already computed (CACHED_POD_SPEC_DIGEST)."""
    view = Sandbox(sandbox)
    cached = view.spec.get(CACHED_POD_SPEC_DIGEST)
    if isinstance(cached, str):
        return cached
    pod_spec = view.pod_template.spec
    canonical = json.dumps(pod_spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def pod_spec_changed(session: Mapping[str, Any], sandbox: Mapping[str, Any] | None) -> bool:
    """The kept checkpoint was taken from another pod spec than the Sandbox's now (issue 49 item 7). A record
    without a digest (an older operator's) is judged as before: restored."""
    recorded = Session(session).hibernation.get("podSpecDigest")
    return bool(recorded) and recorded != pod_spec_digest(sandbox)


def spec_changed_record(checkpoint: str) -> dict[str, Any]:
    """``status.hibernation`` of a wake into a changed pod spec: fresh, and the image deleted."""
    return {
        "hibernated": False,
        "reason": phases.REASON_POD_SPEC_CHANGED,
        "message": f"woke without its processes (started fresh, workspace kept): the Sandbox's pod spec changed "
        f"since checkpoint {checkpoint} was taken, and a restore would not apply the new one; the image is deleted",
        "checkpoint": None,
        "sizeBytes": None,
        "takenAt": None,
        "podSpecDigest": None,
    }


def restored_record(hibernation: dict[str, Any], now: datetime) -> dict[str, Any]:
    """``status.hibernation`` once the restored pod is Ready: nothing kept (the image is deleted)."""
    taken = parse_time(hibernation.get("takenAt"))
    age = checkpoint_age_seconds(taken, now)
    return {
        "hibernated": False,
        "reason": phases.REASON_RESTORED,
        "message": f"woke from checkpoint {hibernation.get('checkpoint')} "
        f"({hibernation.get('sizeBytes')} bytes, {age:.0f} s old); the image is deleted"
        if age is not None
        else "woke from its checkpoint; the image is deleted",
        "checkpoint": None,
        "sizeBytes": None,
        "takenAt": None,
        "podSpecDigest": None,
    }


MAX_RESTORE_ERROR_CHARS = 500


def restore_failed_record(checkpoint: str, failure: str) -> dict[str, Any]:
    """``status.hibernation`` once a woken pod is Ready that the shim started fresh (its restore failed:
    the image missing, corrupt, or refused by runsc): the workspace is kept, the processes are not."""
    error = " ".join(failure.split())[:MAX_RESTORE_ERROR_CHARS] or "(no detail)"
    return {
        "hibernated": False,
        "reason": phases.REASON_RESTORE_FAILED,
        "message": f"woke without its processes (started fresh, workspace kept): the restore from checkpoint "
        f"{checkpoint} failed: {error}; the image is deleted",
        "checkpoint": None,
        "sizeBytes": None,
        "takenAt": None,
        "podSpecDigest": None,
    }


def kept_checkpoint(session: Mapping[str, Any]) -> str | None:
    """The checkpoint a hibernated session wakes from, None when it has none. Only the session's own image
    (its name recomputed from the session's name and UID): a status naming any other (forged, or another
    session's) restores nothing and is not this session's to delete (issue 49 item 1)."""
    hibernation = Session(session).hibernation
    name = hibernation.get("checkpoint")
    if hibernation.get("hibernated") and name in own_checkpoints(session) and is_valid_checkpoint_name(str(name)):
        return str(name)
    return None


def sandbox_restore_from(sandbox: Mapping[str, Any] | None) -> str | None:
    """The restore annotation on the Sandbox's pod template, if any."""
    value = Sandbox(sandbox).pod_template.annotations.get(names.ANNOTATION_RESTORE_FROM)
    return value if isinstance(value, str) else None


def claim_restore_from(claim: Mapping[str, Any] | None) -> str | None:
    """The restore annotation in the claim's additionalPodMetadata, if any."""
    value = Claim(claim).pod_annotations.get(names.ANNOTATION_RESTORE_FROM)
    return value if isinstance(value, str) else None


# The wake names the checkpoint in two places. On the Sandbox's pod template, which its pod is created from;
# and on the claim's additionalPodMetadata, because agent-sandbox's claim controller sets the Sandbox's pod
# metadata back to the template's plus the claim's on every pass: named on the Sandbox alone, the annotation
# is gone again as soon as the claim controller sees the Sandbox change, and the pod, when the Sandbox
# controller creates it later, starts fresh. The claim is patched first, so no pass of the claim controller
# after the Sandbox's resume can drop it.


def wake_claim_patch(checkpoint: str | None) -> dict[str, Any]:
    """The claim's patch on a wake, before the Sandbox's: the claim controller keeps the annotation there."""
    annotations = restore_annotations(checkpoint)
    if not annotations:
        return {}
    return {"spec": {"additionalPodMetadata": {"annotations": annotations}}}


def wake_patch(checkpoint: str | None) -> dict[str, Any]:
    """Merged into a resume's Sandbox patch: the new pod restores from the checkpoint."""
    annotations = restore_annotations(checkpoint)
    if not annotations:
        return {}
    return {"spec": {"podTemplate": {"metadata": {"annotations": annotations}}}}


def clear_restore_claim_patch() -> dict[str, Any]:
    """Once the restored pod is Ready, first: the claim controller then drops it from the Sandbox too."""
    return {"spec": {"additionalPodMetadata": {"annotations": {names.ANNOTATION_RESTORE_FROM: None}}}}


def clear_restore_patch() -> dict[str, Any]:
    """Once the restored pod is Ready: a restart of it must start fresh, not restore the image again."""
    return {"spec": {"podTemplate": {"metadata": {"annotations": {names.ANNOTATION_RESTORE_FROM: None}}}}}


# ---- a deleted (or expired) session's image: deleted with it ------------------------------------------
#
# Bounded, never a finalizer: the operator has no write on AgentSessions but their status (a finalizer of
# its own would need `patch` on agentsessions, which would let it rewrite any tenant's spec), and deleting a
# session never waits for the operator (handlers/events.py). So the operator tries when it sees the
# session go (its DELETED event, a relist that lacks it, or a pass over a deleted or expired session), a few
# times over FORGET_DELAYS, and then gives up with a Warning Event CheckpointNotDeleted naming the image:
# an unreachable node agent never keeps a deletion (or the operator's pass) waiting. What that leaves behind
# (the agents down for every try, or the session deleted while the operator was down) the sweep collects:
# at every take-over and resync the operator lists each node's images and deletes those no live session
# owns (images_to_sweep), judged on a live listing of the namespace's sessions, never on the cache.

FORGET_DELAYS: tuple[float, ...] = (2.0, 10.0, 30.0)
"""Seconds before each retry of a delete the node agents did not all answer: 4 tries within ~45 s."""

REASON_CHECKPOINT_DELETED: Final = "CheckpointDeleted"
EVENT_CHECKPOINT_NOT_DELETED: Final = "CheckpointNotDeleted"


@dataclass(frozen=True)
class DeleteOutcome:
    """The node agents' answers to one delete: whether one deleted the image, and how many did not answer."""

    deleted: bool
    asked: int
    unreachable: int
    restore_failed: str | None = None
    """Why the shim's restore from the image failed (the pod then started fresh), None when it did not."""


@dataclass(frozen=True)
class Owned:
    """The images a namespace's live sessions may still wake from, or are taking."""

    names: frozenset[str]
    """Each hibernated session's recorded image (issue 49 item 7: its older ones are not)."""
    prefixes: tuple[str, ...]
    """Each session not hibernated: any image of its (one may be being taken: the status names it after)."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self.names or name.startswith(self.prefixes))


def owned_checkpoints(sessions: Iterable[Mapping[str, Any]]) -> Owned:
    """The image names the listed sessions may still wake from: every session's but an ended one's (expired,
    failed, or being deleted). A hibernated session owns the image its status records; one that is not
    (running, or mid-checkpoint) owns every image of its, since one may be being taken."""
    names_: set[str] = set()
    prefixes: list[str] = []
    for session in sessions:
        view = Session(session)
        if view.deleting or view.phase in phases.TERMINAL_PHASES:
            continue
        kept = kept_checkpoint(session)
        if kept is not None:
            names_.add(kept)
        else:
            prefixes.append(checkpoint_prefix(view.name, view.uid))
            names_.add(checkpoint_name(view.name, view.uid))
    return Owned(frozenset(names_), tuple(prefixes))


def images_to_sweep(
    images: Iterable[tuple[str, str]], live: Mapping[str, Iterable[Mapping[str, Any]]]
) -> list[tuple[str, str]]:
    """The (namespace, name) images no live session owns. ``live``: each namespace's sessions as the API
    listed them just now; an image of a namespace not in it (not this replica's, or its listing failed) stays."""
    owned = {namespace: owned_checkpoints(sessions) for namespace, sessions in live.items()}
    return [(ns, name) for ns, name in images if ns in owned and name not in owned[ns]]


def checkpoint_to_forget(session: Mapping[str, Any]) -> str | None:
    """The image a deleted or expired session leaves behind (its kept checkpoint), None when there is none."""
    return kept_checkpoint(session)


def forget_step(outcome: DeleteOutcome, attempt: int, delays: tuple[float, ...] = FORGET_DELAYS) -> float | None:
    """After try ``attempt`` (0-based): None when done (deleted, or every agent answered without it: nothing
    left), or seconds to wait before the next try (:func:`gave_up` then says whether the image may remain)."""
    if outcome.deleted or (outcome.asked > 0 and outcome.unreachable == 0):
        return None
    return delays[attempt] if attempt < len(delays) else None


def gave_up(outcome: DeleteOutcome) -> bool:
    """True when the last try still left an agent unanswered (or none was Ready): the image may remain."""
    return not outcome.deleted and (outcome.asked == 0 or outcome.unreachable > 0)


def not_deleted_message(namespace: str, checkpoint: str, outcome: DeleteOutcome, tries: int) -> str:
    why = "no node agent was Ready" if outcome.asked == 0 else f"{outcome.unreachable} node agent(s) did not answer"
    return (
        f"the checkpoint image {namespace}/{checkpoint} (the sandbox's memory) may remain on its node: {why} "
        f"after {tries} tries; delete <checkpoint root>/{namespace}/{checkpoint} on the node by hand"
    )


def forgotten_record(checkpoint: str) -> dict[str, Any]:
    """``status.hibernation`` of an expired session once its image is deleted (it will not wake)."""
    return {
        "hibernated": False,
        "reason": REASON_CHECKPOINT_DELETED,
        "message": f"the session ended: its checkpoint {checkpoint} is deleted",
        "checkpoint": None,
        "sizeBytes": None,
        "takenAt": None,
        "podSpecDigest": None,
    }
