"""The router credential issuer: per-session, expiring tokens for agent-sandbox's sandbox router.

- ``tokens``: upstream's v2 scoped token (Ed25519) and the key files (pure).
- ``lineage``: which Sandbox is a session's own, by UID (pure).
- ``issuer``: one issuance: TokenReview, SubjectAccessReview, the session's Sandbox, the tokens.
- ``server``: the HTTPS endpoint and its published ConfigMap.
"""

from agentsession_operator.issuer.issuer import Answer, Issuer
from agentsession_operator.issuer.server import IssuerConfig, IssuerServer
from agentsession_operator.issuer.tokens import SigningKey, Target

__all__ = ["Answer", "Issuer", "IssuerConfig", "IssuerServer", "SigningKey", "Target"]
