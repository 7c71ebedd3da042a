"""Hibernate (issue 33): whether an idle session's suspend keeps its memory, pure.

The flow the I/O shell drives: ``before_checkpoint`` (is this session one whose sandbox can be
checkpointed at all: a gVisor template, a node agent on its node), then the node agent's checkpoint,
then ``after_checkpoint`` (did it work, is the image within the bound). Either way the session then
suspends; a verdict that does not hibernate is a plain Suspend with its reason on condition Hibernated.
On wake, ``restore_annotations`` is what the Sandbox's pod template carries so the shim restores it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentsession_api import names, patterns, phases
from agentsession_api.timestamps import format_time, parse_time

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


def checkpoint_name(session_name: str, session_uid: str) -> str:
    """The image's name under ``<root>/<namespace>/``: one per session (its UID), a DNS label."""
    digest = hashlib.sha256(session_uid.encode()).hexdigest()[:10]
    return f"{session_name[:52].rstrip('-')}-{digest}"


def is_valid_checkpoint_name(name: str) -> bool:
    """A plain DNS label: no separators, no ``..`` (the node agent and the shim refuse anything else)."""
    return patterns.is_dns1123_label(name)


def runtime_class_of(template: dict[str, Any] | None) -> str | None:
    """The SandboxTemplate's pod runtimeClassName, or None (the cluster's default runtime)."""
    if not template:
        return None
    pod_spec = (((template.get("spec") or {}).get("podTemplate") or {}).get("spec")) or {}
    value = pod_spec.get("runtimeClassName")
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


def after_checkpoint(result: CheckpointResult, max_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES) -> HibernateVerdict:
    """The node agent's answer judged: hibernated, or a plain Suspend saying why (the image then deleted)."""
    if result.not_gvisor:
        verdict = template_verdict(None)
        assert verdict is not None
        return HibernateVerdict(False, verdict.reason, f"{verdict.message} ({result.error[:200]})")
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


def record(verdict: HibernateVerdict, checkpoint: str | None, size_bytes: int | None, now: datetime) -> dict[str, Any]:
    """``status.hibernation`` after a hibernate: the kept checkpoint, or why there is none."""
    kept = verdict.hibernate and checkpoint is not None
    return {
        "hibernated": kept,
        "reason": verdict.reason,
        "message": verdict.message,
        "checkpoint": checkpoint if kept else None,
        "sizeBytes": size_bytes if kept else None,
        "takenAt": format_time(now) if kept else None,
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
    }


def kept_checkpoint(status: Mapping[str, Any] | None) -> str | None:
    """The checkpoint a hibernated session wakes from, None when it has none."""
    hibernation = (status or {}).get("hibernation") or {}
    name = hibernation.get("checkpoint")
    if hibernation.get("hibernated") and isinstance(name, str) and is_valid_checkpoint_name(name):
        return name
    return None


def sandbox_restore_from(sandbox: Mapping[str, Any] | None) -> str | None:
    """The restore annotation on the Sandbox's pod template, if any."""
    template = ((sandbox or {}).get("spec") or {}).get("podTemplate") or {}
    value = ((template.get("metadata") or {}).get("annotations") or {}).get(names.ANNOTATION_RESTORE_FROM)
    return value if isinstance(value, str) else None


def wake_patch(checkpoint: str | None) -> dict[str, Any]:
    """Merged into a resume's Sandbox patch: the new pod restores from the checkpoint."""
    annotations = restore_annotations(checkpoint)
    if not annotations:
        return {}
    return {"spec": {"podTemplate": {"metadata": {"annotations": annotations}}}}


def clear_restore_patch() -> dict[str, Any]:
    """Once the restored pod is Ready: a restart of it must start fresh, not restore the image again."""
    return {"spec": {"podTemplate": {"metadata": {"annotations": {names.ANNOTATION_RESTORE_FROM: None}}}}}
