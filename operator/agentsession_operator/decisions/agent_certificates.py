"""Which node agent a certificate request comes from, pure (issue 49 item 5, TLS).

A node agent proves which node it serves with a certificate the operator's own CA signed for that node: it
makes a key at start and asks for the certificate with a CertificateSigningRequest for SIGNER. The API server
writes into the request who made it (``spec.username``, and for a pod's token ``spec.extra``'s pod name and
UID), which no requester can forge; the operator signs only a request made by an agent pod's own token, for
the node that pod runs on, whatever the request's subject says. The operator then connects to an agent
verifying that its certificate names ``server_name(agent's node)``: a listener at the agent's address, or
another node's agent, is refused before the token is sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agentsession_api.node_agent import SIGNER

POD_NAME: Final = "authentication.kubernetes.io/pod-name"
POD_UID: Final = "authentication.kubernetes.io/pod-uid"
NODE_NAME: Final = "authentication.kubernetes.io/node-name"
"""Where the API server puts the requesting pod (and, from Kubernetes 1.30, its node) in ``spec.extra``."""

USAGES: Final = frozenset({"digital signature", "key encipherment", "server auth"})
"""What an agent's certificate may be used for: serving TLS, nothing else (never client auth)."""


@dataclass(frozen=True)
class Grant:
    """Sign: the request is the agent pod's on ``node``."""

    node: str
    pod: str


@dataclass(frozen=True)
class Refusal:
    """Deny, saying why."""

    reason: str
    message: str


def _conditions(csr: Mapping[str, Any]) -> set[str]:
    return {str(c.get("type")) for c in (csr.get("status") or {}).get("conditions") or []}


def open_request(csr: Mapping[str, Any]) -> bool:
    """Whether ``csr`` is one for the operator to answer: its signer, no certificate yet, neither denied nor
    failed (an approved one without a certificate is signed: the replica that approved it may have stopped)."""
    spec, status = csr.get("spec") or {}, csr.get("status") or {}
    if spec.get("signerName") != SIGNER or status.get("certificate"):
        return False
    return not _conditions(csr) & {"Denied", "Failed"}


def approved(csr: Mapping[str, Any]) -> bool:
    return "Approved" in _conditions(csr)


def _one(extra: Mapping[str, Any], key: str) -> str:
    values = extra.get(key) or []
    return str(values[0]) if isinstance(values, list) and len(values) == 1 else ""


def judge(csr: Mapping[str, Any], agent_pods: Sequence[Mapping[str, Any]]) -> Grant | Refusal:
    """Sign or deny an open request for SIGNER, given the agents' pods (the DaemonSet's, by its selector)."""
    spec = csr.get("spec") or {}
    extra = spec.get("extra") or {}
    pod_name, pod_uid = _one(extra, POD_NAME), _one(extra, POD_UID)
    if not pod_name or not pod_uid:
        return Refusal(
            "NotAPod",
            f"{spec.get('username', '?')} asked without a pod's token: only a node agent's pod may ask {SIGNER}",
        )
    pod = next((p for p in agent_pods if (p.get("metadata") or {}).get("uid") == pod_uid), None)
    meta = (pod or {}).get("metadata") or {}
    if pod is None or meta.get("name") != pod_name:
        return Refusal("NotANodeAgent", f"pod {pod_name} ({pod_uid}) is not a node agent's pod")
    account_name = (pod.get("spec") or {}).get("serviceAccountName", "")
    account = f"system:serviceaccount:{meta.get('namespace', '')}:{account_name}"
    if spec.get("username") != account:
        return Refusal("NotANodeAgent", f"{spec.get('username', '?')} is not the node agent's account {account}")
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    if not node:
        return Refusal("NotScheduled", f"node agent pod {pod_name} runs on no node yet")
    told = _one(extra, NODE_NAME)
    if told and told != node:  # the token's node (Kubernetes 1.30+) against the pod's: never differ
        return Refusal("NodeMismatch", f"the token names node {told}, pod {pod_name} runs on {node}")
    usages = set(spec.get("usages") or [])
    if "server auth" not in usages or not usages <= USAGES:
        return Refusal("BadUsages", f"usages {sorted(usages)}: a node agent's certificate serves TLS only")
    return Grant(node, pod_name)
