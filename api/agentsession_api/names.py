"""Names of the API: group, version, kinds, plurals, and the labels and annotations on objects."""

from __future__ import annotations

from typing import Final

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

LABEL_SESSION: Final = f"{GROUP}/session"
"""On every child: the session's name (hashed down to a valid label value when longer than 63)."""
LABEL_SESSION_UID: Final = f"{GROUP}/session-uid"
LABEL_SANDBOX_CLIENT: Final = f"{GROUP}/sandbox-client"
"""On an application's pods (value ``"true"``): the session NetworkPolicy admits such pods of the session's own
namespace, and no others."""

POD_IDENTITY_AUDIENCE: Final = f"{GROUP}/pod-identity"
"""The audience of the token a sandbox pod shows its clients to prove which pod it is: a projected
ServiceAccount token that the kubelet mints for that pod alone (its name, UID and namespace are claims the
API server signs), and that the API server itself refuses (not its audience), so showing it grants nothing."""
POD_IDENTITY_VOLUME: Final = "agentsession-pod-identity"
"""The SandboxTemplate volume (a projected serviceAccountToken of :data:`POD_IDENTITY_AUDIENCE`) that gives a
sandbox pod its identity token; clients refuse a pod without one unless told to trust addresses alone."""
POD_IDENTITY_DIR: Final = f"/var/run/secrets/{GROUP}/pod-identity"
"""Where the sandbox container mounts :data:`POD_IDENTITY_VOLUME` (read-only)."""
POD_IDENTITY_TOKEN_PATH: Final = f"{POD_IDENTITY_DIR}/token"
"""The token file the clients' probe reads in the pod."""

ANNOTATION_SCHEMA_REVISION: Final = f"{GROUP}/schema-revision"
"""On the generated CRDs: the revision of their schema (:data:`SCHEMA_REVISION`)."""
SCHEMA_REVISION: Final = 6
"""Bumped with every change of the generated CRD schemas (tests/unit/api/test_api_schema_revision.py
fails until it is). The operator refuses to start while an installed CRD carries a lower one: the API
server prunes fields its CRD does not know, so an old CRD silently drops a new policy limit."""
ANNOTATION_ACTIVITY: Final = f"{GROUP}/activity"
"""Written by the client, read by the operator: see :mod:`agentsession_api.activity`."""

ANNOTATION_RESTORE_FROM: Final = f"{GROUP}/restore-from"
"""On a gVisor pod: the checkpoint (under the node's checkpoint root, in the pod's namespace) its shim restores
it from (devcluster/gvisor/restoreext); set by the operator on a hibernated session's wake (issue 33)."""
ANNOTATION_VOLUME_COPY: Final = f"{GROUP}/volume-copy"
"""On a StorageClass, set by the cluster admin: how its volumes can be copied for a fork. ``Clone``: the
driver clones a PVC named in dataSource (CSI CLONE_VOLUME). Kubernetes advertises no such capability, so
a class without this annotation is never assumed to clone."""
VOLUME_COPY_CLONE: Final = "Clone"

RESERVED_LABEL_DOMAINS: Final = (GROUP, "agents.x-k8s.io")
"""Label key domains users may not set in spec.labels, subdomains included: ours and agent-sandbox's."""
RESERVED_LABEL_PREFIXES: Final = tuple(f"{domain}/" for domain in RESERVED_LABEL_DOMAINS)

DENIED_ENV_DEFAULTS: Final = (
    "LD_*",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PYTHONINSPECT",
    "PYTHONBREAKPOINT",
    "BASH_ENV",
    "ENV",
    "PROMPT_COMMAND",
    "SHELLOPTS",
    "PERL5LIB",
    "PERL5OPT",
    "RUBYOPT",
    "RUBYLIB",
    "NODE_OPTIONS",
    "NODE_PATH",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "GCONV_PATH",
    "MALLOC_*",
    "GLIBC_TUNABLES",
)
"""spec.env names refused whatever the policies say: loader and interpreter hooks that run the tenant's
code inside every process of the sandbox runtime (globs, case-sensitive)."""

# agent-sandbox's rules for Pod metadata, checked at admission so a session fails early, not its claim later.
DEFAULT_ALLOWED_LABEL_DOMAINS: Final = ("sandbox.users.io",)
"""agent-sandbox's pod label allowlist when ConfigMap agent-sandbox-config sets none (subdomains count)."""
RESTRICTED_ANNOTATION_DOMAINS: Final = ("kubernetes.io", "k8s.io", "agents.x-k8s.io")
"""Pod annotation domains agent-sandbox refuses (subdomains too), with the exemption below."""
EXEMPT_ANNOTATION_KEYS: Final = ("cluster-autoscaler.kubernetes.io/safe-to-evict",)

MAX_LINEAGE: Final = 16
"""Distinct ancestors a fork records in status.lineage: a fork of a source that would need more is refused."""
MAX_LINEAGE_LABELS: Final = 64
"""Labels recorded per ancestor in status.lineage: a fork of a source with more metadata.labels is refused."""
