"""Watches the benchmarks keep running beside a measurement: one kind listed, then watched from that listing's
resourceVersion, resumed where it left off (listed again only after a 410), in a daemon thread."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import defaultdict
from typing import Any

from kubernetes import client, watch

SESSIONS = ("agentsession.dev", "v1alpha1", "agentsessions")
CLAIMS = ("extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims")
Key = tuple[str, str]  # (namespace, name)


class ListWatch(threading.Thread):
    """Every object of one kind (cluster-wide, or `namespace`'s) goes to `see(event type, object)`: the
    listing's as "LISTED", then each watch event but bookmarks. `ready` is set once the first listing is seen."""

    def __init__(self, api: client.CustomObjectsApi, kind: tuple[str, str, str], namespace: str | None = None) -> None:
        super().__init__(daemon=True)
        self.api, self.kind, self.namespace = api, kind, namespace
        self.stop = threading.Event()
        self.ready = threading.Event()

    def see(self, event: str, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def _call(self) -> tuple[Any, ...]:
        if self.namespace is None:
            return (self.api.list_cluster_custom_object, *self.kind)
        group, version, plural = self.kind
        return (self.api.list_namespaced_custom_object, group, version, self.namespace, plural)

    def run(self) -> None:
        version = ""
        call, *args = self._call()
        while not self.stop.is_set():
            try:
                if not version:
                    listing = call(*args)
                    for item in listing["items"]:
                        self.see("LISTED", item)
                    version = listing["metadata"]["resourceVersion"]
                    self.ready.set()
                stream = watch.Watch().stream(
                    call, *args, resource_version=version, allow_watch_bookmarks=True, timeout_seconds=60
                )
                for event in stream:
                    version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self.see(event["type"], event["object"])
                    if self.stop.is_set():
                        return
            except client.ApiException as exc:
                version = "" if exc.status == 410 else version
                time.sleep(0.5)
            except Exception:  # a dropped connection: resume from `version`
                time.sleep(0.5)


class ExpiredWatch(ListWatch):
    """When this process first saw each session with phase Expired (wall clock), by (namespace, name)."""

    def __init__(self, api: client.CustomObjectsApi, namespace: str | None = None) -> None:
        super().__init__(api, SESSIONS, namespace)
        self.expired_at: dict[Key, dt.datetime] = {}

    def see(self, event: str, body: dict[str, Any]) -> None:
        if event != "DELETED" and (body.get("status") or {}).get("phase") == "Expired":
            meta = body["metadata"]
            self.expired_at.setdefault((meta["namespace"], meta["name"]), dt.datetime.now(dt.UTC))


class ClaimWatch(ListWatch):
    """Every claim: the claim UIDs each owner session UID ever had (two: a duplicate)."""

    def __init__(self, api: client.CustomObjectsApi) -> None:
        super().__init__(api, CLAIMS)
        self.by_owner: dict[str, set[str]] = defaultdict(set)

    def see(self, event: str, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "AgentSession":
                self.by_owner[ref["uid"]].add(meta["uid"])

    def duplicates(self) -> int:
        return sum(1 for claims in self.by_owner.values() if len(claims) > 1)
