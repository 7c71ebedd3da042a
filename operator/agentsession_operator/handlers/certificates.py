"""The node agents' certificate requests (issue 49 item 5): registered only with --node-agent, handed to the
signer (kube/agent_certificates.py). Every replica answers; the request's resourceVersion lets one win."""

from __future__ import annotations

from typing import Any

import kopf

from agentsession_api.node_agent import SIGNER
from agentsession_operator.handlers.state import of


async def certificate_requested(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    reconciler = of(memo).reconciler
    if reconciler is not None and reconciler.agent_signer is not None:
        await reconciler.agent_signer.answer(dict(body))


def register(registry: kopf.OperatorRegistry) -> None:
    kopf.on.event(
        "certificates.k8s.io",
        "v1",
        "certificatesigningrequests",
        field="spec.signerName",
        value=SIGNER,
        registry=registry,
    )(certificate_requested)
