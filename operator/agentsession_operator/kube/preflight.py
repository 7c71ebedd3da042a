"""Refuse to start, with a message that says what to do, against an agent-sandbox older than v1.0."""

from __future__ import annotations

from agentsession_operator import constants as c
from agentsession_operator.kube.client import Kube

REQUIRED = {
    f"{c.CLAIM_PLURAL}.{c.EXTENSIONS_GROUP}": c.EXTENSIONS_VERSION,
    f"{c.WARM_POOL_PLURAL}.{c.EXTENSIONS_GROUP}": c.EXTENSIONS_VERSION,
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
