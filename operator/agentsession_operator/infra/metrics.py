"""Prometheus metrics of the operator (served on --metrics-port)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

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
REAP_LAG = Histogram(
    "agentsession_reap_lag_seconds",
    "From an idle or TTL deadline to the action taken",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
)
API_RETRIES = Counter(
    "agentsession_api_retries_total", "Requests sent again (429 / 5xx with Retry-After, broken GETs)", ["reason"]
)
CACHE_RESYNC_DROPPED = Counter(
    "agentsession_cache_resync_dropped_total", "Cached objects a relist no longer had (deleted unseen)", ["kind"]
)


def serve(port: int, addr: str = "127.0.0.1") -> None:
    start_http_server(port, addr=addr)
