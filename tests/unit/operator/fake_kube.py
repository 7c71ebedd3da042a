"""An in-memory API server for the operator's shell (kube/): the methods of kube.client.Kube a pass
calls, over dicts, recording every read and write."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

Key = tuple[str, str]


class FakeKube:
    """The methods of kube.client.Kube the reconciler calls, over dicts; records every write."""

    def __init__(self) -> None:
        self.sessions: dict[Key, dict[str, Any]] = {}
        self.claims: dict[Key, dict[str, Any]] = {}
        self.sandboxes: dict[Key, dict[str, Any]] = {}
        self.pools: set[Key] = set()
        self.templates: dict[Key, dict[str, Any]] = {}
        self.policies: list[dict[str, Any]] = []
        self.network_policies: dict[Key, dict[str, Any]] = {}
        self.writes: list[tuple[str, Any]] = []
        self.reads: list[tuple[str, Any]] = []
        self.fail_status_writes = 0
        self.gate: asyncio.Event | None = None  # when set, status writes wait for it

    async def list_policies(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [copy.deepcopy(p) for p in self.policies]

    async def list_warm_pools(self) -> list[dict[str, Any]]:
        return [{"metadata": {"namespace": ns, "name": name}} for ns, name in self.pools]

    async def list_templates(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(t) for t in self.templates.values()]

    async def list_page(self, kind: str, token: str | None = None) -> tuple[list[dict[str, Any]], str, str | None]:
        """Everything in one page (the pages themselves: test_op_relist)."""
        self.reads.append(("list", kind))
        tables = {
            "sessions": self.sessions,
            "claims": self.claims,
            "sandboxes": self.sandboxes,
            "network_policies": self.network_policies,
        }
        return [copy.deepcopy(body) for body in tables[kind].values()], "1", None

    async def get_session(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append(("get-session", name))
        return copy.deepcopy(self.sessions.get((namespace, name)))

    async def list_sessions(self, namespace: str | None = None, selector: str | None = None) -> list[dict[str, Any]]:
        return [copy.deepcopy(s) for (ns, _), s in self.sessions.items() if namespace in (None, ns)]

    async def patch_session_status(
        self, namespace: str, name: str, status: dict[str, Any], uid: str | None = None, has_status: bool = True
    ) -> dict[str, Any] | None:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_status_writes:
            self.fail_status_writes -= 1
            raise RuntimeError("API unavailable")
        self.writes.append(("status", name))
        body = self.sessions.get((namespace, name))
        if body is None or (uid is not None and body["metadata"].get("uid") != uid):
            return None  # gone, or another session under the name (the API server's test op fails)
        merged = {**(body.get("status") or {}), **status}
        body["status"] = {k: v for k, v in merged.items() if v is not None}
        meta = body["metadata"]
        meta["resourceVersion"] = str(int(meta.get("resourceVersion", "1")) + 1)
        return copy.deepcopy(body)

    async def delete_session(self, namespace: str, name: str, uid: str) -> None:
        self.writes.append(("delete-session", name))

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append(("get-claim", name))
        return copy.deepcopy(self.claims.get((namespace, name)))

    async def create_claim(self, claim: dict[str, Any]) -> dict[str, Any] | None:
        key = (claim["metadata"]["namespace"], claim["metadata"]["name"])
        self.writes.append(("create-claim", key[1]))
        if key in self.claims:
            return None
        self.claims[key] = {**claim, "metadata": {**claim["metadata"], "uid": f"claim-{key[1]}"}}
        return copy.deepcopy(self.claims[key])

    async def patch_claim(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.writes.append(("patch-claim", name))

    async def delete_claim(self, namespace: str, name: str, uid: str | None = None) -> bool:
        self.writes.append(("delete-claim", name))
        return self.claims.pop((namespace, name), None) is not None

    async def get_sandbox(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.sandboxes.get((namespace, name)))

    async def patch_sandbox(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.writes.append(("patch-sandbox", name))

    async def get_warm_pool(self, namespace: str, name: str) -> dict[str, Any] | None:
        return {"metadata": {"name": name}} if (namespace, name) in self.pools else None

    async def get_network_policy(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.network_policies.get((namespace, name)))

    async def create_network_policy(self, manifest: dict[str, Any]) -> dict[str, Any] | None:
        key = (manifest["metadata"]["namespace"], manifest["metadata"]["name"])
        self.writes.append(("create-network-policy", key[1]))
        if key in self.network_policies:
            return None
        self.network_policies[key] = copy.deepcopy(manifest)
        return copy.deepcopy(manifest)

    async def replace_network_policy(self, current: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
        key = (manifest["metadata"]["namespace"], manifest["metadata"]["name"])
        self.writes.append(("replace-network-policy", key[1]))
        self.network_policies[key] = {**copy.deepcopy(current), "spec": copy.deepcopy(manifest["spec"])}
        return copy.deepcopy(self.network_policies[key])

    async def allowed_label_domains(self, namespace: str, name: str) -> list[str]:
        return ["sandbox.users.io"]

    async def event(self, obj: dict[str, Any], reason: str, message: str, type_: str = "Normal") -> None:
        self.writes.append(("event", reason))


def store(kube: FakeKube, session: dict[str, Any]) -> Key:
    """Put a session into the fake API server; its key."""
    key = (session["metadata"]["namespace"], session["metadata"]["name"])
    session["metadata"].setdefault("resourceVersion", "1")
    kube.sessions[key] = session
    return key
