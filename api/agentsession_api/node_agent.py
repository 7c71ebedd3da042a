"""The contract between the operator and the node agent (issues 33 and 49): the two are separate distributions,
so what both sides must agree on lives here, once.

- Tokens: the operator mints each node's agent a token of that node's audience; an agent admits no other.
- TLS: an agent serves with a certificate the operator's CA signed, through a CertificateSigningRequest for
  ``SIGNER``, naming ``server_name(node)``; the operator checks that name before it sends a token.
- Checkpoint images: named by plain DNS labels only (the agent and the gVisor shim refuse anything else).
"""

from __future__ import annotations

from typing import Final

from agentsession_api import patterns

AUDIENCE: Final = "agentsession-nodeagent"
"""The audience of the operator's tokens for the node agents: a token for the API server (or any other) is
refused."""


def audience_for(node: str) -> str:
    """The audience of one node's agent (issue 49 item 5): the operator mints each node's token for it, so a
    token one agent receives is refused by every other node's agent. "" (no node known): the shared one."""
    return f"{AUDIENCE}:{node}" if node else AUDIENCE


SIGNER: Final = "agentsession.dev/nodeagent"
"""The CertificateSigningRequests' signerName: only the operator signs them, with its own CA."""

CERTIFICATE_SECONDS: Final = 7 * 24 * 3600
"""The longest an agent's certificate lives (the agent asks again after two thirds of what it got)."""


def server_name(node: str) -> str:
    """The DNS name an agent's certificate carries, and that the operator checks, for ``node``: never an IP
    (a node named like one) and never a name that resolves anywhere."""
    return f"{node}.nodeagent.agentsession.dev"


def is_valid_checkpoint_name(name: str) -> bool:
    """A plain DNS label: no separators, no ``..`` (the node agent and the shim refuse anything else)."""
    return patterns.is_dns1123_label(name)
