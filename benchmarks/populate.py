"""Populating the cluster with sessions, shared by the benchmarks: create N AgentSessions (a 409 is one
that is already there) in batches over a thread pool, list them page by page through a busy API server,
and wait until all count as populated (Ready, or any phase) within a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

GROUP, VERSION, PLURAL = "agentsession.dev", "v1alpha1", "agentsessions"
BUSY = (429, 500, 503, 504)
"""What a loaded API server answers a paged list it could not finish ("too large resource version", ...)."""


class _Sessions(Protocol):
    def create_namespaced_custom_object(self, group: str, version: str, ns: str, plural: str, body: Any) -> Any: ...
    def list_namespaced_custom_object(self, group: str, version: str, ns: str, plural: str, **kw: Any) -> Any: ...
    def list_cluster_custom_object(self, group: str, version: str, plural: str, **kw: Any) -> Any: ...


def _status(err: Exception) -> int | None:
    status = getattr(err, "status", None)
    return status if isinstance(status, int) else None


def create_sessions(
    api: _Sessions,
    keys: Sequence[tuple[str, str]],
    body: Callable[[str], dict[str, Any]],
    *,
    threads: int = 16,
    batch: int = 250,
) -> None:
    """Create the (namespace, name) sessions `body(name)`; one already there (409) counts as created."""

    def create(key: tuple[str, str]) -> None:
        try:
            api.create_namespaced_custom_object(GROUP, VERSION, key[0], PLURAL, body(key[1]))
        except Exception as err:
            if _status(err) != 409:
                raise

    for first in range(0, len(keys), batch):
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(create, keys[first : first + batch]))
        print(f"{time.strftime('%H:%M:%S')} created {min(len(keys), first + batch)}/{len(keys)}", flush=True)


def list_sessions(api: _Sessions, namespace: str | None = None, attempts: int = 10) -> list[dict[str, Any]]:
    """Every session (of `namespace`, or of the cluster), page by page; a busy answer is retried."""
    found: list[dict[str, Any]] = []
    token = None
    while True:
        for attempt in range(attempts):
            try:
                if namespace is None:
                    page = api.list_cluster_custom_object(GROUP, VERSION, PLURAL, limit=500, _continue=token)
                else:
                    page = api.list_namespaced_custom_object(
                        GROUP, VERSION, namespace, PLURAL, limit=500, _continue=token
                    )
                break
            except Exception as err:
                if _status(err) not in BUSY or attempt == attempts - 1:
                    raise
                time.sleep(2)
        found += page["items"]
        token = page["metadata"].get("continue")
        if not token:
            return found


def phase(session: dict[str, Any]) -> str | None:
    return (session.get("status") or {}).get("phase")


def wait_populated(count: Callable[[], int], n: int, timeout: float, what: str = "Ready", poll: float = 5.0) -> None:
    """Poll `count()` until it reaches `n`; SystemExit after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        done = count()
        if done >= n:
            print(f"{time.strftime('%H:%M:%S')} {n} sessions {what}", flush=True)
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"only {done} of {n} sessions {what} after {timeout:.0f} s")
        time.sleep(poll)
