"""Names shared by the operator, its CRDs and its clients: one place, so a rename is one edit."""

from __future__ import annotations

from typing import Final

# --- Our API ---------------------------------------------------------------------------------------
GROUP: Final = "agentsession.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

SESSION_KIND: Final = "AgentSession"
SESSION_PLURAL: Final = "agentsessions"
SESSION_SINGULAR: Final = "agentsession"
SESSION_SHORT_NAMES: Final = ("ags",)
SESSION_CATEGORIES: Final = ("agentsandbox",)

POLICY_KIND: Final = "AgentSessionPolicy"
POLICY_PLURAL: Final = "agentsessionpolicies"
POLICY_SINGULAR: Final = "agentsessionpolicy"
POLICY_SHORT_NAMES: Final = ("agsp",)

# --- Labels, annotations, finalizer ---------------------------------------------------------------
LABEL_SESSION: Final = f"{GROUP}/session"
"""On every child: the session's name (hashed down to a valid label value when longer than 63)."""
LABEL_SESSION_UID: Final = f"{GROUP}/session-uid"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "agentsession-operator"

ANNOTATION_ACTIVITY: Final = f"{GROUP}/activity"
"""Written by the client: ``"<RFC 3339 timestamp> busy=<seconds>"``; its changes drive the idle clock."""

FINALIZER: Final = f"{GROUP}/finalizer"
KOPF_PREFIX: Final = GROUP
"""kopf's progress and diff-base annotations live under this prefix (never change it once deployed)."""

RESERVED_LABEL_PREFIXES: Final = (f"{GROUP}/", "agents.x-k8s.io/")
"""Label key prefixes users may not set in spec.labels: ours and agent-sandbox's."""

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

SANDBOX_LAUNCH_TYPE_LABEL: Final = "agents.x-k8s.io/launch-type"
"""Set by agent-sandbox on the Sandbox: ``warm`` or ``cold``."""

DEFAULT_ALLOWED_LABEL_DOMAINS: Final = ("sandbox.users.io",)
"""agent-sandbox's pod label allowlist when ConfigMap agent-sandbox-config sets none (subdomains count)."""
RESTRICTED_ANNOTATION_DOMAINS: Final = ("kubernetes.io", "k8s.io", "agents.x-k8s.io")
"""Pod annotation domains agent-sandbox refuses (subdomains too), with the exemption below."""
EXEMPT_ANNOTATION_KEYS: Final = ("cluster-autoscaler.kubernetes.io/safe-to-evict",)

# --- Phases, conditions, reasons -------------------------------------------------------------------
PHASE_PENDING: Final = "Pending"
PHASE_PROVISIONING: Final = "Provisioning"
PHASE_READY: Final = "Ready"
PHASE_SUSPENDED: Final = "Suspended"
PHASE_EXPIRED: Final = "Expired"
PHASE_FAILED: Final = "Failed"
PHASE_TERMINATING: Final = "Terminating"
PHASES: Final = (
    PHASE_PENDING,
    PHASE_PROVISIONING,
    PHASE_READY,
    PHASE_SUSPENDED,
    PHASE_EXPIRED,
    PHASE_FAILED,
    PHASE_TERMINATING,
)

COND_READY: Final = "Ready"
COND_CLAIM_CREATED: Final = "ClaimCreated"
COND_POLICY_COMPLIANT: Final = "PolicyCompliant"
COND_EXPIRED: Final = "Expired"
COND_FAILED: Final = "Failed"

REASON_TTL_EXPIRED: Final = "TTLExpired"
REASON_IDLE_TIMEOUT: Final = "IdleTimeout"
REASON_WARM_POOL_NOT_FOUND: Final = "WarmPoolNotFound"
REASON_NO_WARM_POOL: Final = "NoWarmPool"
REASON_POLICY_VIOLATION: Final = "PolicyViolation"
REASON_CLAIM_CONFLICT: Final = "ClaimConflict"
REASON_CLAIM_PENDING: Final = "ClaimPending"
REASON_SUSPEND_REQUESTED: Final = "SuspendRequested"
REASON_DELETING: Final = "Deleting"

IDLE_ACTION_DELETE: Final = "Delete"
IDLE_ACTION_SUSPEND: Final = "Suspend"

OPERATING_MODE_RUNNING: Final = "Running"
OPERATING_MODE_SUSPENDED: Final = "Suspended"
