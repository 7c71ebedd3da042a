"""Whether a SandboxTemplate gives its pods the identity token the clients check (issue 51 item 1), pure.

Both clients ask the pod for its projected ServiceAccount token (audience ``agentsession.dev/pod-identity``,
the template's ``agentsession-pod-identity`` volume) before they send it anything of a session, and refuse a
pod without one (``UnverifiedPod``). A template written before that, or one that lost the volume, gives
sessions that every default client refuses: condition PodIdentity says so on the session, naming the fix,
instead of the user finding it in a client's error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from agentsession_api import names

KEPT: Final = f"{names.GROUP}/podIdentity"
"""Where the operator's cached copy of a template keeps :func:`mounts_identity` (kube/cache.py keeps no pod
template). A key no template spec has (it holds a slash)."""

REASON_MOUNTED: Final = "IdentityVolumeMounted"
REASON_MISSING: Final = "NoIdentityVolume"


@dataclass(frozen=True)
class TemplateIdentity:
    template: str
    mounted: bool


def mounts_identity(template: Mapping[str, Any] | None) -> bool:
    """The template's pods carry the identity token where the clients read it: a volume of that name projecting
    a serviceAccountToken of that audience, mounted at POD_IDENTITY_DIR in every container."""
    pod_spec = ((((template or {}).get("spec") or {}).get("podTemplate") or {}).get("spec")) or {}
    volume = next(
        (
            v
            for v in pod_spec.get("volumes") or []
            if isinstance(v, Mapping) and v.get("name") == names.POD_IDENTITY_VOLUME
        ),
        None,
    )
    sources = ((volume or {}).get("projected") or {}).get("sources") or []
    projected = any(
        isinstance(s, Mapping) and (s.get("serviceAccountToken") or {}).get("audience") == names.POD_IDENTITY_AUDIENCE
        for s in sources
    )
    containers = [c for c in pod_spec.get("containers") or [] if isinstance(c, Mapping)]
    mounted = bool(containers) and all(
        any(
            isinstance(m, Mapping)
            and m.get("name") == names.POD_IDENTITY_VOLUME
            and m.get("mountPath") == names.POD_IDENTITY_DIR
            for m in c.get("volumeMounts") or []
        )
        for c in containers
    )
    return projected and mounted


def of_template(template: Mapping[str, Any] | None) -> TemplateIdentity | None:
    """What the template gives its pods, None when the template is not known. A cached copy carries the
    verdict (KEPT); a whole template is judged."""
    if not template:
        return None
    name = str((template.get("metadata") or {}).get("name") or "")
    kept = (template.get("spec") or {}).get(KEPT)
    return TemplateIdentity(name, kept if isinstance(kept, bool) else mounts_identity(template))


def condition(identity: TemplateIdentity) -> tuple[bool, str, str]:
    """Condition PodIdentity: status, reason, message."""
    if identity.mounted:
        return (
            True,
            REASON_MOUNTED,
            f"SandboxTemplate {identity.template} gives its pods the identity token the clients check "
            f"({names.POD_IDENTITY_VOLUME})",
        )
    return (
        False,
        REASON_MISSING,
        f"SandboxTemplate {identity.template} has no {names.POD_IDENTITY_VOLUME} volume (a projected "
        f"serviceAccountToken of audience {names.POD_IDENTITY_AUDIENCE}, mounted at {names.POD_IDENTITY_DIR} in "
        "every container): the clients refuse its pods by default (UnverifiedPod). Add the volume (README, "
        "Reaching the pod) or have clients pass pod_identity='address'",
    )
