"""The operator's state: one typed object that kopf's memo carries (``memo.state``).

What the command line set before kopf started (cli.py; ``kopf run`` and KopfRunner get the defaults),
and what the startup handler built. kopf copies the memo for each object it handles, shallowly: every
handler sees this same object, so no module global is needed and no key is spelled twice.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

import kopf

from agentsession_operator.admission.server import WebhookConfig
from agentsession_operator.decisions import quota
from agentsession_operator.decisions.actions import DEFAULT_EXPIRY_WARNING
from agentsession_operator.decisions.network import NetworkSettings
from agentsession_operator.issuer.server import IssuerConfig, IssuerServer
from agentsession_operator.kube.client import Kube
from agentsession_operator.kube.election import KubeLeaseAPI, LeaderElector, ShardElector, Timing
from agentsession_operator.kube.node_agent import TOKEN_PATH
from agentsession_operator.kube.reconciler import Reconciler
from agentsession_operator.kube.resync import RESYNC_PERIOD


@dataclass(frozen=True)
class Election:
    """Leader election's Lease and timing (cli: --lease-*); None in OperatorState: the only replica.
    With shards above 1 (cli: --shards), one Lease per shard named after `name` (kube/election/sharding.py)."""

    namespace: str
    name: str
    identity: str
    timing: Timing
    shards: int = 1


@dataclass
class OperatorState:
    # Set by the command line.
    webhook: WebhookConfig | None = None
    namespaces: tuple[str, ...] = ()
    election: Election | None = None
    network: NetworkSettings = field(default_factory=NetworkSettings)
    expiry_warning: dt.timedelta | None = DEFAULT_EXPIRY_WARNING
    resync_period: float = RESYNC_PERIOD
    node_agent: str | None = None
    """--node-agent: NAMESPACE/selector of the node agent's pods (idleAction Hibernate), None: off."""
    node_agent_token: Path = TOKEN_PATH
    node_agent_account: str = ""
    """--node-agent-account: NAMESPACE/ServiceAccount the per-node tokens are minted for ("" : the token file)."""
    node_agent_ca_secret: tuple[str, str] | None = None
    """--node-agent-ca-secret: the Secret of the node agents' CA, which signs their certificates."""
    max_checkpoint_bytes: int = 512 * 1024 * 1024
    max_sessions_per_namespace: int = quota.DEFAULT_MAX_SESSIONS_PER_NAMESPACE
    """--max-sessions-per-namespace: the cap of a namespace no AgentSessionPolicy caps (0: none)."""
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
