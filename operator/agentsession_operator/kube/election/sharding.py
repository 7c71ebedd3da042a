"""Sharding by namespace, as rules (no I/O, no clock): which shard a namespace is in, which Leases a
replica campaigns for, how many shards it should hold and which it lets go.

The scheme (docs/operations.md, "Sharding"):

- A fixed number of shards S (--shards). A namespace's shard is a stable hash of its name mod S, the
  same on every replica and every restart, so every session (and its children, which live in its
  namespace) belongs to exactly one shard.
- One Lease per shard, ``<lease-name>-shard-<i>``, under kube/election/lease.py's rules: at most one replica acts
  on a shard at a time, by the same argument as the single Lease (the old holder stops acting
  renew_deadline after its last renewal, before anyone may take it after lease_duration).
- Membership: S slot Leases ``<lease-name>-member-<j>``, each replica holding one (same rules). The
  replicas counted are the live slots; a replica holds up to ceil(S / replicas) shards and releases
  the shards above that, so a replica that joins gets its share and the shards of one that leaves are
  taken by the others. Slots (not one Lease per pod) keep the names fixed, so RBAC can name each one,
  and nothing is left behind by a replica that dies.
"""

from __future__ import annotations

import hashlib
import math
import zlib
from collections.abc import Iterable, Sequence

MAX_SHARDS = 64


def shard_of(namespace: str, count: int) -> int:
    """The shard of a namespace: CRC-32 of its name mod `count` (stable across processes, unlike hash())."""
    return zlib.crc32(namespace.encode()) % count


def shard_lease_name(base: str, shard: int) -> str:
    return f"{base}-shard-{shard}"


def member_lease_name(base: str, slot: int) -> str:
    return f"{base}-member-{slot}"


def preference(identity: str, count: int) -> list[int]:
    """The order in which a replica tries shards (and slots): rendezvous hashing of (identity, index), so
    two replicas starting together mostly reach for different shards instead of racing for the same."""
    return sorted(range(count), key=lambda i: hashlib.sha256(f"{identity}/{i}".encode()).digest())


def target(count: int, replicas: int) -> int:
    """How many shards one replica should hold: its share, rounded up (so together they hold all)."""
    return math.ceil(count / max(1, replicas))


def to_release(held: Iterable[int], order: Sequence[int], share: int) -> list[int]:
    """The shards above the replica's share, least preferred first out: let go so another replica takes them."""
    mine = [shard for shard in order if shard in set(held)]
    return mine[share:][::-1]


def may_take(held: int, share: int) -> int:
    """How many more shards the replica may take this round (none once it holds its share)."""
    return max(0, share - held)
