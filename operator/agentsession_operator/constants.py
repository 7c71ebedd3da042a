"""The operator's own names and agent-sandbox's; the AgentSession API's names live in agentsession_api."""

from __future__ import annotations

from typing import Final

from agentsession_api.names import GROUP

# --- The operator's marks on objects ---------------------------------------------------------------
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "agentsession-operator"
FINALIZER: Final = f"{GROUP}/finalizer"
KOPF_PREFIX: Final = GROUP
"""kopf's progress and diff-base annotations live under this prefix (never change it once deployed)."""

# --- agent-sandbox (kubernetes-sigs/agent-sandbox v1.0.x) -------------------------------------------
SANDBOX_GROUP: Final = "agents.x-k8s.io"
SANDBOX_VERSION: Final = "v1beta1"
SANDBOX_API_VERSION: Final = f"{SANDBOX_GROUP}/{SANDBOX_VERSION}"
SANDBOX_KIND: Final = "Sandbox"
SANDBOX_PLURAL: Final = "sandboxes"

EXTENSIONS_GROUP: Final = "extensions.agents.x-k8s.io"
EXTENSIONS_VERSION: Final = "v1beta1"
EXTENSIONS_API_VERSION: Final = f"{EXTENSIONS_GROUP}/{EXTENSIONS_VERSION}"
CLAIM_KIND: Final = "SandboxClaim"
CLAIM_PLURAL: Final = "sandboxclaims"
WARM_POOL_KIND: Final = "SandboxWarmPool"
WARM_POOL_PLURAL: Final = "sandboxwarmpools"
TEMPLATE_KIND: Final = "SandboxTemplate"
TEMPLATE_PLURAL: Final = "sandboxtemplates"

SANDBOX_CLAIM_UID_LABEL: Final = "agents.x-k8s.io/claim-uid"
"""Set by agent-sandbox on a claimed Sandbox and copied to its Pod (cold start and warm adoption alike): the
claim's UID. agent-sandbox never copies reserved agents.x-k8s.io/ keys from a template or a claim."""
SANDBOX_LAUNCH_TYPE_LABEL: Final = "agents.x-k8s.io/launch-type"
"""Set by agent-sandbox on the Sandbox: ``warm`` or ``cold``."""

OPERATING_MODE_RUNNING: Final = "Running"
OPERATING_MODE_SUSPENDED: Final = "Suspended"
# The Sandbox's Suspended condition (agent-sandbox api/v1beta1/sandbox_types.go): reasons while its Pod is
# still going away (PodNotTerminated is the deprecated spelling of PodTerminating).
SANDBOX_COND_SUSPENDED: Final = "Suspended"
SANDBOX_POD_STILL_TERMINATING: Final = ("PodTerminating", "PodNotTerminated")
