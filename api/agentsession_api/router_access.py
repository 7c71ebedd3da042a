"""The router credential contract: how a client obtains per-session credentials for agent-sandbox's router.

The operator is the issuer (operator/agentsession_operator/issuer/); the clients (Python and TypeScript)
obtain and renew. The router (upstream's sandbox-router, ``--authz-mode=scoped-token`` with Ed25519 keys)
only verifies: each credential authorizes one method and path on one port of one Sandbox, bound to its UID,
until it expires.

Who may obtain them is Kubernetes RBAC's to say: ``create`` on ``agentsessions/connect`` for that session's
name in its namespace (as ``create pods/exec`` decides who may exec into a pod). The caller shows its own
Kubernetes bearer token (a ServiceAccount's, or any the API server authenticates); the issuer asks the API
server who it is (TokenReview) and whether it may (SubjectAccessReview).
"""

from __future__ import annotations

from typing import Final

from agentsession_api import names as _names

CONNECT_VERB: Final = "create"
CONNECT_SUBRESOURCE: Final = "connect"
"""RBAC's word on who may reach a session through the router: ``create`` on ``agentsessions/connect``."""
CONNECT_RESOURCE: Final = f"{_names.SESSION_PLURAL}/{CONNECT_SUBRESOURCE}"

ISSUER_CONFIGMAP: Final = "agentsession-router-issuer"
"""The ConfigMap (in the operator's namespace) where the operator publishes where its issuer answers."""
ISSUER_CONFIGMAP_NAMESPACE: Final = "agentsession-system"
ISSUER_URL_KEY: Final = "url"
ISSUER_CA_KEY: Final = "ca.crt"
"""The issuer's TLS certificate authority (PEM): the client verifies the issuer before it shows its token."""

TOKENS_PATH: Final = "/v1/namespaces/{namespace}/agentsessions/{name}/router-tokens"
"""``POST`` with ``{"port": int, "requests": [{"method": str, "path": str}, ...]}`` and the caller's
``Authorization: Bearer``; answers ``{"sandbox": str, "sandboxUID": str, "expires": int, "tokens": [str, ...]}``
(one token per request, in order; ``expires`` in Unix seconds), or ``{"message": str}`` with 400, 401, 403,
404, 409 (the session has no sandbox yet) or 503."""
MAX_REQUESTS: Final = 64
"""Tokens one call may ask for."""
MAX_BODY_BYTES: Final = 16 << 10
TOKEN_PATH_PATTERN: Final = r"^/[A-Za-z0-9._~/-]{0,1023}$"
"""Paths a token may bind: what the router's canonical form leaves as it is (no percent-encoding, no query)."""
TOKEN_METHODS: Final = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH")

# What upstream's v2 scoped token is (sandbox-router/authz/scopedtoken_v2.go): `v2.<kid>.<payload>.<sig>`,
# base64url without padding, the signature over this context + kid + "." + payload.
RENEW_MARGIN: Final = 60
"""Seconds before its expiry a client replaces a token (a request must reach the router before its `exp`)."""

SCOPED_TOKEN_VERSION: Final = "v2"
SCOPED_TOKEN_SIGNING_CONTEXT: Final = "agent-sandbox/scoped-token/v2."

SANDBOX_UID_HEADER: Final = "X-Sandbox-UID"
"""v2 tokens need the router told the Sandbox's UID (and refuse X-Sandbox-Pod-IP: an address is not signed)."""
