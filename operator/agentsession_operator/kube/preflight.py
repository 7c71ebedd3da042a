"""Refuse to start, with a message that says what to do, against an agent-sandbox older than v1.0 or
AgentSession CRDs older than this operator (the API server prunes the fields an old CRD does not know:
a new policy limit would be dropped, with a warning at most)."""

from __future__ import annotations

from typing import Any

from agentsession_api import names
from agentsession_operator import constants as c
from agentsession_operator.kube.client import Kube

OWN_CRDS = (f"{names.SESSION_PLURAL}.{names.GROUP}", f"{names.POLICY_PLURAL}.{names.GROUP}")
CRD_UPGRADE_COMMAND = "kubectl apply --server-side --force-conflicts -f crds/"
CRD_UPGRADE = (
    f"Apply the CRDs of this operator's release: {CRD_UPGRADE_COMMAND} (Helm installs a chart's crds/ "
    "once and never upgrades them; --force-conflicts takes over the fields Helm wrote), then restart the operator."
)
REQUIRED = {
    f"{c.CLAIM_PLURAL}.{c.EXTENSIONS_GROUP}": c.EXTENSIONS_VERSION,
    f"{c.WARM_POOL_PLURAL}.{c.EXTENSIONS_GROUP}": c.EXTENSIONS_VERSION,
    f"{c.TEMPLATE_PLURAL}.{c.EXTENSIONS_GROUP}": c.EXTENSIONS_VERSION,
    f"{c.SANDBOX_PLURAL}.{c.SANDBOX_GROUP}": c.SANDBOX_VERSION,
}


class PreflightError(SystemExit):
    """Exits the process with a one-paragraph explanation instead of a stack trace."""

    def __init__(self, message: str) -> None:
        super().__init__(f"agentsession-operator cannot start: {message}")


def problems(served: dict[str, list[str] | None]) -> list[str]:
    """What is wrong with the installed agent-sandbox CRDs (pure: `served` maps CRD name -> versions)."""
    out = []
    for crd, version in REQUIRED.items():
        versions = served.get(crd)
        if versions is None:
            out.append(f"CRD {crd} is not installed")
        elif version not in versions:
            out.append(f"CRD {crd} serves {', '.join(versions) or 'no version'}, not {version}")
    return out


async def check_agent_sandbox(kube: Kube) -> None:
    served = {crd: await kube.crd_served_versions(crd) for crd in REQUIRED}
    found = problems(served)
    if found:
        raise PreflightError(
            "agent-sandbox v1.0 or newer (with extensions) is required: "
            + "; ".join(found)
            + ". Install it first (release manifest sandbox-with-extensions.yaml, v1.0.x), then restart."
        )


def stale_crds(installed: dict[str, dict[str, Any] | None], required: int = names.SCHEMA_REVISION) -> list[str]:
    """What is wrong with our own CRDs (pure: `installed` maps CRD name -> its metadata.annotations, None
    when the CRD is not installed). A CRD without the annotation predates revisions: revision 0."""
    out = []
    for crd in OWN_CRDS:
        if crd not in installed or installed[crd] is None:
            out.append(f"CRD {crd} is not installed")
            continue
        text = (installed[crd] or {}).get(names.ANNOTATION_SCHEMA_REVISION, "0")
        try:
            revision = int(text)
        except ValueError:
            out.append(f"CRD {crd} has {names.ANNOTATION_SCHEMA_REVISION}={text!r}, not a number")
            continue
        if revision < required:
            out.append(f"CRD {crd} has schema revision {revision}, this operator needs {required}")
    return out


async def _annotations(kube: Kube, name: str) -> dict[str, Any] | None:
    crd = await kube.get_crd(name)
    return None if crd is None else dict((crd.get("metadata") or {}).get("annotations") or {})


async def check_own_crds(kube: Kube) -> None:
    found = stale_crds({crd: await _annotations(kube, crd) for crd in OWN_CRDS})
    if found:
        raise PreflightError(
            "the installed AgentSession CRDs are older than this operator, and the API server would drop every "
            "field they lack (policy limits among them), with a warning at most: "
            + "; ".join(found)
            + ". "
            + CRD_UPGRADE
        )
