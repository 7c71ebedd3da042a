"""Where a session's create -> Ready goes: who holds it at each step, seen from watches on its namespace.

A session (name N, a valid DNS-1035 label, so its claim, Sandbox and cold Pod are named N too) goes:
  operator      create -> SandboxClaim N exists
  agent-sandbox claim -> Pod N exists
  node          Pod created -> Pod Ready (scheduler, kubelet or kwok)
  agent-sandbox Pod Ready -> Sandbox N Ready
  operator      Sandbox Ready -> session Ready (the caller's own watch: its create and Ready times)
Each time is when this process saw the event (a watch's delivery is in every step alike). Used by
bench_fairness to say which component a churning tenant slows down.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client, watch

from agentsession_operator import constants as c

STEPS = ("claim", "pod", "pod ready", "sandbox ready", "session ready")
OWNERS = ("operator", "agent-sandbox", "node", "agent-sandbox", "operator")


def _ready(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(cond.get("type") == "Ready" and cond.get("status") == "True" for cond in conditions)


class Timeline:
    """Watches claims, Sandboxes and Pods of one namespace in threads, noting when each name first reached
    each step; `split(name, created, ready)` turns that into each step's seconds."""

    def __init__(self, api: client.CustomObjectsApi, core: client.CoreV1Api, namespace: str) -> None:
        self.seen: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        custom = api.list_namespaced_custom_object
        sources: list[tuple[Callable[..., Any], tuple[Any, ...], Callable[[dict[str, Any]], Iterator[str]]]] = [
            (custom, (c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, namespace, c.CLAIM_PLURAL), lambda o: iter(["claim"])),
            (custom, (c.SANDBOX_GROUP, c.SANDBOX_VERSION, namespace, c.SANDBOX_PLURAL), self._sandbox_steps),
            (core.list_namespaced_pod, (namespace,), self._pod_steps),
        ]
        self._threads = [threading.Thread(target=self._follow, args=source, daemon=True) for source in sources]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _sandbox_steps(obj: dict[str, Any]) -> Iterator[str]:
        if _ready(obj):
            yield "sandbox ready"

    @staticmethod
    def _pod_steps(obj: dict[str, Any]) -> Iterator[str]:
        yield "pod"
        if _ready(obj):
            yield "pod ready"

    def _follow(
        self, list_fn: Callable[..., Any], args: tuple[Any, ...], steps: Callable[[dict[str, Any]], Iterator[str]]
    ) -> None:
        version = None
        while not self._stop.is_set():
            w = watch.Watch()
            kwargs: dict[str, Any] = {"timeout_seconds": 5}
            if version:
                kwargs["resource_version"] = version
            try:
                for event in w.stream(list_fn, *args, **kwargs):
                    now = time.monotonic()
                    obj = event["object"]
                    obj = obj if isinstance(obj, dict) else client.ApiClient().sanitize_for_serialization(obj)
                    version = obj["metadata"].get("resourceVersion", version)
                    if event["type"] == "DELETED":
                        continue
                    name = obj["metadata"]["name"]
                    with self._lock:
                        for step in steps(obj):
                            self.seen.setdefault((name, step), now)
                    if self._stop.is_set():
                        w.stop()
            except client.ApiException as exc:
                if exc.status != 410:
                    raise
                version = None  # expired: the next stream lists afresh (setdefault keeps the first times)

    def split(self, name: str, created: float, ready: float) -> dict[str, float] | None:
        """Seconds of each step for `name` (None when a step was not seen, e.g. it timed out)."""
        with self._lock:
            times = [self.seen.get((name, step)) for step in STEPS[:-1]]
        if any(t is None for t in times):
            return None
        points = [created, *(t for t in times if t is not None), ready]
        return {step: max(0.0, b - a) for step, a, b in zip(STEPS, points[:-1], points[1:], strict=True)}

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)


def print_split(splits: dict[str, list[dict[str, float]]]) -> None:
    """Median milliseconds of each step per condition, and each step's ratio to the first condition's."""
    conditions = list(splits)
    base = conditions[0]
    medians = {
        cond: {step: statistics.median(s[step] for s in rows) if rows else float("nan") for step in STEPS}
        for cond, rows in splits.items()
    }
    header = f"{'step (who)':<30}" + "".join(f"{cond:>18}" for cond in conditions)
    print("Where B's create -> Ready went (median ms per step; ratio to " + base + ")")
    print(header)
    for step, owner in zip(STEPS, OWNERS, strict=True):
        row = f"{step + ' (' + owner + ')':<30}"
        for cond in conditions:
            ms, ratio = 1000 * medians[cond][step], medians[cond][step] / max(1e-9, medians[base][step])
            row += f"{ms:>9.0f} ({ratio:>5.2f})" if cond != base else f"{ms:>18.0f}"
        print(row)
