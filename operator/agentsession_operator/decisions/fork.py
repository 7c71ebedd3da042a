"""Forks (``spec.forkFrom``): from the source session and its volumes to the fork's claim volumes, or why not.

A fork's claim carries one volumeClaimTemplate per volume of the source's Sandbox, with the same name,
size, access modes and storage class, and ``dataSource`` naming the source's PVC: the storage layer makes
the copy (a CSI clone), never the sandbox runtime. agent-sandbox names a Sandbox's PVCs
``<template name>-<sandbox name>`` and copies each template's spec into its PVC verbatim, dataSource
included (controllers/sandbox_controller.go, reconcilePVCs).

Policies: every policy that selects the source (or a session the source came from) holds for the fork
too, whatever its labels (:mod:`lineage`): the fork's ``status.lineage`` records them, before its claim.

Nothing is created until every check passes: a fork that cannot be made has no claim and no PVC, only a
status that says why. The reconciler gathers the inputs (source session, claim, Sandbox, PVCs and
StorageClasses); everything here is pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentsession_api import names, phases
from agentsession_api.phases import Phase
from agentsession_api.views import Claim, Obj, Sandbox, Session
from agentsession_operator.decisions import lineage
from agentsession_operator.decisions.desired import suspension_settled
from agentsession_operator.decisions.ownership import is_owned_by

FORKABLE_PHASES = (Phase.READY, Phase.SUSPENDED)
RECREATE = "then delete and recreate the fork (spec.forkFrom is immutable)"


@dataclass(frozen=True)
class ForkPlan:
    """The fork can be made: its warm pool (the source's unless the fork names one) and claim volumes."""

    source: str
    warm_pool: str | None
    volumes: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class ForkBlocked:
    """No claim yet: Pending while the source gets there, Failed for something a user must fix."""

    phase: str
    reason: str
    message: str


def source_name(session: Mapping[str, Any]) -> str | None:
    """``spec.forkFrom.name``, or None for a session that is no fork."""
    return Session(session).fork_from


def pvc_name(template_name: str, sandbox_name: str) -> str:
    """agent-sandbox's name for the PVC of a Sandbox's volumeClaimTemplate."""
    return f"{template_name}-{sandbox_name}"


def source_templates(sandbox: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The Sandbox's volumeClaimTemplates (the template's and the claim's, as agent-sandbox merged them)."""
    return Sandbox(sandbox).volume_claim_templates


def source_pvc_names(sandbox: Mapping[str, Any] | None) -> list[str]:
    """The PVCs the reconciler must read for :func:`plan_fork`."""
    name = Sandbox(sandbox).name
    return [pvc_name(Obj(t).name, name) for t in source_templates(sandbox)] if name else []


def _failed(reason: str, message: str) -> ForkBlocked:
    return ForkBlocked(Phase.FAILED, reason, message)


def _waiting(message: str) -> ForkBlocked:
    return ForkBlocked(Phase.PENDING, phases.REASON_SOURCE_NOT_READY, message)


def _bound_source(
    source: Mapping[str, Any], claim: Mapping[str, Any] | None, sandbox: Mapping[str, Any] | None
) -> Mapping[str, Any] | None:
    """The source's Sandbox, only when ownership proves it (session -> claim -> Sandbox, by UID)."""
    if claim is None or not is_owned_by(claim, Session(source).uid):
        return None
    bound = Claim(claim).bound_sandbox
    if sandbox is None or not bound or Sandbox(sandbox).name != bound:
        return None
    return sandbox if is_owned_by(sandbox, Claim(claim).uid) else None


def copy_method(storage_class: Mapping[str, Any] | None) -> str | None:
    """How a class's volumes can be copied: Clone when its admin annotated it so, else None."""
    value = Obj(storage_class).annotations.get(names.ANNOTATION_VOLUME_COPY)
    return names.VOLUME_COPY_CLONE if value == names.VOLUME_COPY_CLONE else None


def _clone_template(template: Mapping[str, Any], pvc: Mapping[str, Any]) -> dict[str, Any]:
    """The fork's volumeClaimTemplate for one source volume: same shape, dataSource the source PVC."""
    volume, claimed = Obj(template), Obj(pvc)
    spec = claimed.spec
    requests = (spec.get("resources") or {}).get("requests") or {}
    out_meta: dict[str, Any] = {"name": volume.meta.get("name")}
    if volume.labels:
        out_meta["labels"] = dict(volume.labels)
    if volume.annotations:
        out_meta["annotations"] = dict(volume.annotations)
    out_spec: dict[str, Any] = {
        "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
        "resources": {"requests": {"storage": requests.get("storage", "1Gi")}},
        "storageClassName": spec.get("storageClassName"),
        "dataSource": {"kind": "PersistentVolumeClaim", "name": claimed.meta.get("name")},
    }
    if spec.get("volumeMode"):
        out_spec["volumeMode"] = spec["volumeMode"]
    return {"metadata": out_meta, "spec": out_spec}


def plan_fork(
    fork: Mapping[str, Any],
    source: Mapping[str, Any] | None,
    source_claim: Mapping[str, Any] | None,
    source_sandbox: Mapping[str, Any] | None,
    pvcs: Mapping[str, Mapping[str, Any] | None],
    storage_classes: Mapping[str, Mapping[str, Any] | None],
) -> ForkPlan | ForkBlocked:
    """Whether ``fork`` can get its claim now, and with which volumes.

    ``source`` is the session named by spec.forkFrom in the fork's namespace (None: absent),
    ``source_claim`` its claim, ``source_sandbox`` the Sandbox bound to that claim read with its
    volumeClaimTemplates, ``pvcs`` the source's PVCs by name (:func:`source_pvc_names`; None: absent) and
    ``storage_classes`` those PVCs' classes by name.
    """
    name = source_name(fork) or ""
    namespace = Session(fork).namespace
    field = f"spec.forkFrom.name {name}"
    if name == Session(fork).name:
        return _failed(phases.REASON_SOURCE_NOT_FOUND, f"{field}: a session cannot fork itself; {RECREATE}")
    if source is None or Session(source).deleting:
        return _failed(
            phases.REASON_SOURCE_NOT_FOUND,
            f"{field}: no AgentSession {name} in namespace {namespace} (a fork copies a session of its own "
            f"namespace); create it, or {RECREATE} naming an existing session",
        )
    source_phase = Session(source).phase
    if phases.is_terminal(source_phase):
        return _failed(
            phases.REASON_SOURCE_FINISHED,
            f"{field}: the source is {source_phase} and its volumes are gone or going; {RECREATE} naming a "
            "Ready or Suspended session",
        )
    too_long = lineage.problem(lineage_of(source), name)
    if too_long is not None:
        return _failed(phases.REASON_LINEAGE_TOO_LONG, f"{too_long}; {RECREATE}")
    if source_phase not in FORKABLE_PHASES:
        return _waiting(f"waiting for the source AgentSession {name} to be Ready or Suspended (now {source_phase})")
    sandbox = _bound_source(source, source_claim, source_sandbox)
    if sandbox is None:
        return _waiting(f"waiting for the source AgentSession {name}'s Sandbox")
    if source_phase == Phase.SUSPENDED and not suspension_settled(sandbox):
        # A suspended source is copied once its Pod is gone: nothing writes, the copy is exact.
        return _waiting(f"waiting for the source AgentSession {name}'s Pod to stop (it is being suspended)")
    templates = source_templates(sandbox)
    if not templates:
        return _no_volumes(field)
    volumes = []
    bound = Sandbox(sandbox)
    for template in templates:
        volume = Obj(template).name
        wanted = pvc_name(volume, bound.name)
        pvc = pvcs.get(wanted)
        if pvc is None or not Obj(pvc).spec.get("volumeName"):
            return _waiting(f"waiting for the source's PersistentVolumeClaim {wanted} to be bound")
        if not is_owned_by(pvc, bound.uid):
            return _waiting(f"the source's PersistentVolumeClaim {wanted} is not owned by its Sandbox; waiting")
        class_name = Obj(pvc).spec.get("storageClassName")
        if copy_method(storage_classes.get(class_name or "")) is None:
            return _failed(
                phases.REASON_VOLUME_COPY_UNSUPPORTED,
                f"{field}: volume {volume} is on StorageClass {class_name or '(none)'}, which "
                f"cannot clone volumes as far as the cluster says: if its CSI driver supports volume cloning, "
                f"annotate the class {names.ANNOTATION_VOLUME_COPY}={names.VOLUME_COPY_CLONE} (the fork is checked "
                f"again every 30 s); otherwise fork a session whose volumes are on a class that can",
            )
        volumes.append(_clone_template(template, pvc))
    return ForkPlan(source=name, warm_pool=Session(source).resolved_pool, volumes=tuple(volumes))


def _no_volumes(field: str) -> ForkBlocked:
    return _failed(
        phases.REASON_SOURCE_WITHOUT_VOLUMES,
        f"{field}: the source has no volumes to copy (its Sandbox has no volumeClaimTemplates); a fork copies "
        f"volumes only: fork a session with spec.volumeClaimTemplates (or a template with volumes), or {RECREATE}",
    )


def expand(session: Mapping[str, Any], warm_pool: str | None, volumes: Any) -> dict[str, Any]:
    """The fork as policies and the claim see it: the source's volumes as its volumeClaimTemplates and,
    unless the fork names one, the source's warm pool. The stored object never changes (GitOps owns it)."""
    spec = dict(Session(session).spec)
    if volumes:
        spec["volumeClaimTemplates"] = [dict(v) for v in volumes]
    if warm_pool and not Session(session).warm_pool:
        spec["warmPoolRef"] = {"name": warm_pool}
    return {**session, "spec": spec}


def claim_warm_pool(claim: Mapping[str, Any], session: Mapping[str, Any]) -> str | None:
    """The warm pool of the fork's own claim (None for a claim the session does not own)."""
    if not is_owned_by(claim, Session(session).uid):
        return None
    return Claim(claim).warm_pool


def lineage_of(source: Mapping[str, Any], *older: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``status.lineage`` for a fork of ``source`` (see :func:`lineage.of_source`)."""
    return lineage.of_source(source, *older)


def judged_view(
    session: Mapping[str, Any], source: Mapping[str, Any] | None, *older: Mapping[str, Any]
) -> dict[str, Any]:
    """The fork with the lineage it gets from ``source`` added to what it recorded (policies judge this),
    unless the source is gone or its lineage is too long to record (the fork is refused for that)."""
    if source is None or Session(source).deleting or source_name(session) is None:
        return dict(session)
    view = lineage.with_lineage(session, lineage_of(source, *older))
    if lineage.problem(lineage.recorded(view), source_name(session) or "") is not None:
        return dict(session)
    return view


def admission_view(
    session: Mapping[str, Any], source: Mapping[str, Any] | None, *older: Mapping[str, Any]
) -> dict[str, Any]:
    """At admission (no PVCs read yet): the fork with the source's declared volumes and warm pool, and the
    lineage it will record (``older``: the source's own sources, when the source has not recorded them)."""
    if source is None:
        return dict(session)
    view = judged_view(session, source, *older)
    return expand(view, Session(source).resolved_pool, Session(source).spec.get("volumeClaimTemplates"))


def needs_older(source: Mapping[str, Any]) -> str | None:
    """The source's own source, when the source is a fork that has recorded no lineage yet (created a moment
    ago): admission reads it too, so a fork of a fork is judged by the grandparent's policies at once."""
    return source_name(source) if not lineage.recorded(source) else None


def admission_problems(session: Mapping[str, Any], source: Mapping[str, Any] | None) -> list[str]:
    """Reasons to refuse a new fork outright (the reconciler reports the rest on status)."""
    name = source_name(session)
    if name is None:
        return []
    namespace = Session(session).namespace
    if name == Session(session).name:
        return [f"spec.forkFrom.name {name}: a session cannot fork itself; name another session of {namespace}"]
    if source is None or Session(source).deleting:
        return [
            f"spec.forkFrom.name {name}: no AgentSession {name} in namespace {namespace} (a fork copies a session "
            "of its own namespace); name an existing session"
        ]
    phase = Session(source).phase
    if phases.is_terminal(phase):
        return [f"spec.forkFrom.name {name}: the source is {phase}; name a Ready or Suspended session"]
    too_long = lineage.problem(lineage_of(source), name)
    return [too_long] if too_long is not None else []
