"""Prometheus metrics of the operator (served on --metrics-port)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server

SESSIONS_BY_PHASE = Gauge("agentsession_sessions", "AgentSessions by namespace and phase", ["namespace", "phase"])
RECONCILE_SECONDS = Histogram(
    "agentsession_reconcile_duration_seconds",
    "Time spent reconciling one AgentSession",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
RECONCILE_ERRORS = Counter("agentsession_reconcile_errors_total", "Reconciles that raised", ["kind"])
TIME_TO_READY = Histogram(
    "agentsession_time_to_ready_seconds",
    "From the session's creation to its first Ready",
    buckets=(0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300),
)
CLAIMS_CREATED = Counter("agentsession_claims_created_total", "SandboxClaims created by the operator")
CLAIMS_DELETED = Counter("agentsession_claims_deleted_total", "SandboxClaims deleted by the operator", ["reason"])
CHECKPOINTS_SWEPT = Counter(
    "agentsession_checkpoints_swept_total", "Checkpoint images of gone sessions deleted by the operator's sweep"
)
REAP_LAG = Histogram(
    "agentsession_reap_lag_seconds",
    "From an idle or TTL deadline to the action taken",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
)
API_RETRIES = Counter(
    "agentsession_api_retries_total", "Requests sent again (429 / 5xx with Retry-After, broken GETs)", ["reason"]
)
API_REQUESTS = Counter(
    "agentsession_api_requests_total",
    "Requests the operator's API client sent, each attempt counted, by resource (plural, /subresource) and verb "
    "(get, list, watch, create, update, patch, delete, deletecollection); kopf's own watches are not among them",
    ["resource", "verb"],
)
HELD_WRITES = Counter(
    "agentsession_held_writes_total",
    "Writes sent under a leadership hold, by Lease (a shard's, or the single one) and term (the Lease's "
    "leaseTransitions when this replica took it): two replicas with writes under one Lease and term is two leaders",
    ["lease", "term"],
)
CACHE_RESYNC_DROPPED = Counter(
    "agentsession_cache_resync_dropped_total", "Cached objects a relist no longer had (deleted unseen)", ["kind"]
)

LEADER = Gauge(
    "agentsession_leader",
    "1 while this replica reconciles (holds the Lease, or runs with --no-leader-elect), else 0; with --shards, "
    "the share of the shards whose Lease it holds (summed over the replicas: 1)",
)
SHARD_LEADER = Gauge(
    "agentsession_shard_leader", "1 while this replica holds the shard's Lease (--shards above 1), else 0", ["shard"]
)
SHARDS_HELD = Gauge("agentsession_shards_held", "Shards whose Lease this replica holds (--shards above 1)")
SHARD_READY = Gauge(
    "agentsession_shard_ready",
    "1 while this replica holds the shard and its take-over listing is done (it acts there), else 0",
    ["shard"],
)
FIRST_PASS_DONE = Gauge(
    "agentsession_first_pass_done_timestamp_seconds",
    "When the last take-over's first pass over every session it gained ended (unix time; 0: not yet); "
    "minus process_start_time_seconds, a start's or failover's whole cost",
)
MEMORY_LIMIT = Gauge(
    "agentsession_memory_limit_bytes",
    "The operator container's memory limit (its cgroup's; NaN when unlimited), to compare with "
    "process_resident_memory_bytes: the watch cache grows with the sessions",
)
# cgroup v2, then v1: the limit the kernel OOM-kills the operator at.
CGROUP_MEMORY_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
_UNLIMITED_V1 = 1 << 60  # cgroup v1 writes a huge page-aligned number for "no limit"


def memory_limit(paths: tuple[Path, ...] = CGROUP_MEMORY_LIMITS) -> float:
    """The cgroup memory limit in bytes, NaN when there is none (or no cgroup file to read)."""
    for path in paths:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max" or not text.isdigit() or int(text) >= _UNLIMITED_V1:
            return math.nan
        return float(text)
    return math.nan


MEMORY_LIMIT.set_function(memory_limit)


def report_leadership(is_leader: Callable[[], bool]) -> None:
    """Read leadership at every scrape: the Lease check is a function of the clock, it lapses by itself."""
    LEADER.set_function(lambda: 1.0 if is_leader() else 0.0)


def _held(held: Callable[[int], bool], shard: int) -> float:
    return 1.0 if held(shard) else 0.0


def report_shards(count: int, held: Callable[[int], bool]) -> None:
    """Per shard, read at every scrape like agentsession_leader (each shard's hold lapses by itself)."""
    for shard in range(count):
        SHARD_LEADER.labels(shard=str(shard)).set_function(functools.partial(_held, held, shard))
    SHARDS_HELD.set_function(lambda: float(sum(held(shard) for shard in range(count))))
    LEADER.set_function(lambda: sum(held(shard) for shard in range(count)) / count)


def report_shard_readiness(count: int, ready: Callable[[int], bool]) -> None:
    """Per shard, read at every scrape: held and listed (agentsession_shard_leader without this: not acting)."""
    for shard in range(count):
        SHARD_READY.labels(shard=str(shard)).set_function(functools.partial(_held, ready, shard))


def serve(port: int, addr: str = "127.0.0.1") -> None:
    start_http_server(port, addr=addr)


def process_start_time() -> float | None:
    """This process's start (unix time), as prometheus_client's process collector exports it (None: not Linux)."""
    return REGISTRY.get_sample_value("process_start_time_seconds")


ROUTER_TOKENS = Counter(
    "agentsession_router_token_requests_total",
    "Calls to the router credential issuer, by answer (issued, unauthenticated, forbidden, not_found, ...)",
    ["answer"],
)
