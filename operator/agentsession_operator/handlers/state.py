"""The operator's state: one typed object that kopf's memo carries (``memo.state``).

The settings the command line parsed (cli.py; ``kopf run`` and KopfRunner get the defaults) with what it
built from them, and what the startup handler built. kopf copies the memo for each object it handles,
shallowly: every handler sees this same object, so no module global is needed and no key is spelled twice.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import kopf

from agentsession_operator.admission.server import WebhookConfig
from agentsession_operator.issuer.server import IssuerConfig, IssuerServer
from agentsession_operator.kube.client import Kube
from agentsession_operator.kube.election import KubeLeaseAPI, LeaderElector, ShardElector
from agentsession_operator.kube.reconciler import Reconciler
from agentsession_operator.settings import Election, OperatorSettings


@dataclass
class OperatorState:
    settings: OperatorSettings = field(default_factory=OperatorSettings)
    """Every flag, the one home of each value (cli.py; ``kopf run`` and KopfRunner: the fields' defaults)."""
    # Built from the settings by the command line, each checked there once (None: off, as under ``kopf run``).
    webhook: WebhookConfig | None = None
    election: Election | None = None
    """Leader election's Lease (None: the only replica, always reconciling)."""
    issuer: IssuerConfig | None = None
    """--router-token-key-file and its flags: the router credential issuer (None: off)."""
    # Built by the startup handler, released by the cleanup handler.
    kube: Kube | None = None
    reconciler: Reconciler | None = None
    elector: LeaderElector | ShardElector | None = None
    lease_api: KubeLeaseAPI | None = None
    issuer_server: IssuerServer | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)  # the cache resync, the gc freezer


def of(memo: kopf.Memo) -> OperatorState:
    """The state `memo` carries, created on first use (``kopf run`` starts with an empty memo)."""
    state = memo.get("state")
    if not isinstance(state, OperatorState):
        state = OperatorState()
        memo["state"] = state
    return state


def reconciler_of(memo: kopf.Memo) -> Reconciler:
    """The reconciler the startup handler built (an event before it is a bug: say so)."""
    reconciler = of(memo).reconciler
    if reconciler is None:
        raise RuntimeError("the operator has not started: no reconciler yet (the startup handler builds it)")
    return reconciler
