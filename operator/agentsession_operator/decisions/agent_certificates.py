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
from agentsession_api.views import CertificateRequest, Pod

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


def open_request(csr: Mapping[str, Any]) -> bool:
    """Whether ``csr`` is one for the operator to answer: its signer, no certificate yet, neither denied nor
    failed (an approved one without a certificate is signed: the replica that approved it may have stopped)."""
    request = CertificateRequest(csr)
    if request.signer != SIGNER or request.certificate:
        return False
    return not request.condition_types & {"Denied", "Failed"}


def approved(csr: Mapping[str, Any]) -> bool:
    return "Approved" in CertificateRequest(csr).condition_types


def judge(csr: Mapping[str, Any], agent_pods: Sequence[Mapping[str, Any]]) -> Grant | Refusal:
    """Sign or deny an open request for SIGNER, given the agents' pods (the DaemonSet's, by its selector)."""
    request = CertificateRequest(csr)
    asker = request.username or "?"
    pod_name, pod_uid = request.extra(POD_NAME), request.extra(POD_UID)
    if not pod_name or not pod_uid:
        return Refusal("NotAPod", f"{asker} asked without a pod's token: only a node agent's pod may ask {SIGNER}")
    pod = next((Pod(p) for p in agent_pods if Pod(p).uid == pod_uid), None)
    if pod is None or pod.name != pod_name:
        return Refusal("NotANodeAgent", f"pod {pod_name} ({pod_uid}) is not a node agent's pod")
    account = f"system:serviceaccount:{pod.namespace}:{pod.service_account}"
    if request.username != account:
        return Refusal("NotANodeAgent", f"{asker} is not the node agent's account {account}")
    node = pod.node_name
    if not node:
        return Refusal("NotScheduled", f"node agent pod {pod_name} runs on no node yet")
    told = request.extra(NODE_NAME)
    if told and told != node:  # the token's node (Kubernetes 1.30+) against the pod's: never differ
        return Refusal("NodeMismatch", f"the token names node {told}, pod {pod_name} runs on {node}")
    usages = request.usages
    if "server auth" not in usages or not usages <= USAGES:
        return Refusal("BadUsages", f"usages {sorted(usages)}: a node agent's certificate serves TLS only")
    return Grant(node, pod_name)
