"""Leader and shard election: which replica acts on which namespace, and until when (issue 50 item 4).

The room's modules, lowest floor first (tests/unit/test_architecture.py, KUBE_FLOORS): `hold` (a pass's
writes bound to the hold that allows them; below the transport, which imports it alone), `lease` (the
Lease rules, pure), `sharding` (a namespace's shard, the shard and slot Leases' names, a replica's share,
pure), `layout_guard` (every Lease of the operator in one labelled list), `leader` (`LeaderElector`: one
Lease's I/O), `shard_elector` (`ShardElector`: a Lease per shard, a slot per replica). This face is what
the rest of the operator imports. It is lazy (PEP 562): the transport imports `hold` from below `leader`,
which imports the transport, so loading the electors here would make that a cycle.

Why not kubernetes_asyncio.leaderelection (36.1.0, read for issue 50 item 4)? It holds our guarantees only in part:
- renew deadline < lease duration: checked in its Config, but not kept. Its leader gives up only when a
  renewal attempt ends past the deadline, counted from after a retry_period's sleep that follows the last
  success; its Lease requests have no timeout (aiohttp's unbounded ClientTimeout), so one stalled request
  keeps it leading past the moment a standby takes over. Ours leads until renew_deadline after the last
  successful renewal was *sent*, on the monotonic clock, each round bounded (`Timing.round_timeout`).
- a standby waits a full lease_duration after it first saw the record change: yes, but on the wall clock
  (time.time()), which a clock step shortens.
- the hold binding writes: none. Leading is an on_started_leading task cancelled once the renew loop gives
  up; writes under way or retried behind a Retry-After still land after that. No `is_leader()` to ask.
- release on graceful stop: none (client-go's ReleaseOnCancel is missing), so a rollout waits lease_duration.
It also leaves leaseTransitions (our write term) unwritten, never campaigns again once leadership is lost
(run() returns), and knows one Lease (no shards, labels or layouts). So ours stays.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentsession_operator.kube.election.hold import Hold, HoldOf, NotLeader, bind
    from agentsession_operator.kube.election.layout_guard import LayoutGuard
    from agentsession_operator.kube.election.leader import KubeLeaseAPI, LeaderElector, default_identity
    from agentsession_operator.kube.election.lease import Timing
    from agentsession_operator.kube.election.shard_elector import ShardElector
    from agentsession_operator.kube.election.sharding import MAX_SHARDS, shard_of

__all__ = [
    "MAX_SHARDS",
    "Hold",
    "HoldOf",
    "KubeLeaseAPI",
    "LayoutGuard",
    "LeaderElector",
    "NotLeader",
    "ShardElector",
    "Timing",
    "bind",
    "default_identity",
    "shard_of",
]

_MODULE_OF = {
    "Hold": "hold",
    "HoldOf": "hold",
    "NotLeader": "hold",
    "bind": "hold",
    "LayoutGuard": "layout_guard",
    "KubeLeaseAPI": "leader",
    "LeaderElector": "leader",
    "default_identity": "leader",
    "Timing": "lease",
    "ShardElector": "shard_elector",
    "MAX_SHARDS": "sharding",
    "shard_of": "sharding",
}


def __getattr__(name: str) -> Any:
    """A name of the face, imported from its module on first use."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
