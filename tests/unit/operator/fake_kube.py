"""An in-memory API server for the operator's shell (kube/): the methods of kube.client.Kube a pass
calls, over dicts, recording every read and write.

Writes land as the API server lands them, not looser: a status write is the real client's patch (the
UID-tested JSON patch, or an RFC 7386 merge patch without a UID), validated against the CRD's status type
(a wrong type is refused with 422) and pruned of fields the schema does not know; claim and Sandbox patches
are merge patches applied to the stored object (404 when it is absent); a delete honours its UID
precondition and finalizers (deletionTimestamp, not removal); every write bumps the resourceVersion.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
from typing import Any

import pydantic

from agentsession_api import types
from agentsession_operator.kube.api import ApiException
from agentsession_operator.kube.client import status_json_patch

Key = tuple[str, str]
_STATUS_FIELDS = {f.alias or n for n, f in types.AgentSessionStatus.model_fields.items()}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge member by member, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def json_patch(document: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The RFC 6902 subset the operator sends (test, add), one-level paths under /metadata and /status; a
    failed test or a missing parent is the API server's 422."""
    doc = copy.deepcopy(document)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        for part in parts[:-1]:
            if not isinstance(parent, dict) or part not in parent:
                raise ApiException(status=422, reason=f"{op['path']}: no such parent")
            parent = parent[part]
        if op["op"] == "test":
            if parent.get(parts[-1]) != op["value"]:
                raise ApiException(status=422, reason=f"test {op['path']} failed")
        elif op["op"] == "add":
            parent[parts[-1]] = copy.deepcopy(op["value"])
        else:
            raise AssertionError(f"the fake does not know op {op['op']}")
    return doc


def prune_nulls(value: Any) -> Any:
    """What a structural schema does with null in a non-nullable field (all of ours): drops it, at any depth."""
    if isinstance(value, dict):
        return {k: prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune_nulls(v) for v in value]
    return value


def _bump(body: dict[str, Any]) -> None:
    meta = body["metadata"]
    meta["resourceVersion"] = str(int(meta.get("resourceVersion", "1")) + 1)


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
        self.reads.append(("list", f"policies{_in(namespace)}"))
        return [copy.deepcopy(p) for p in self.policies if _of(p, namespace)]

    async def list_warm_pools(self, namespace: str | None = None) -> list[dict[str, Any]]:
        self.reads.append(("list", f"warm_pools{_in(namespace)}"))
        return [{"metadata": {"namespace": ns, "name": name}} for ns, name in self.pools if namespace in (None, ns)]

    async def list_templates(self, namespace: str | None = None) -> list[dict[str, Any]]:
        self.reads.append(("list", f"templates{_in(namespace)}"))
        return [copy.deepcopy(t) for t in self.templates.values() if _of(t, namespace)]

    async def list_page(
        self, kind: str, token: str | None = None, *, namespace: str | None = None
    ) -> tuple[list[dict[str, Any]], str, str | None]:
        """Everything in one page (the pages themselves: test_op_relist), cluster-wide or of `namespace`."""
        self.reads.append(("list", f"{kind}{_in(namespace)}"))
        tables = {
            "sessions": self.sessions,
            "claims": self.claims,
            "sandboxes": self.sandboxes,
            "network_policies": self.network_policies,
        }
        return [copy.deepcopy(body) for body in tables[kind].values() if _of(body, namespace)], "1", None

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
        if uid is None:
            written = merge_patch(body, {"status": status})
        else:
            try:
                written = json_patch(body, status_json_patch(status, uid, has_status))
            except ApiException:  # the real client reads the session and tries again, shaped as it is now
                written = json_patch(body, status_json_patch(status, uid, body.get("status") is not None))
        new_status = {k: v for k, v in prune_nulls(written.get("status") or {}).items() if k in _STATUS_FIELDS}
        try:
            types.AgentSessionStatus.model_validate(new_status)
        except pydantic.ValidationError as exc:
            raise ApiException(status=422, reason=f"status refused by the CRD's schema: {exc}") from exc
        body["status"] = new_status
        _bump(body)
        return copy.deepcopy(body)

    async def delete_session(self, namespace: str, name: str, uid: str) -> None:
        self.writes.append(("delete-session", name))
        body = self.sessions.get((namespace, name))
        if body is None or body["metadata"].get("uid") != uid:
            return  # 404 or the precondition's 409: the real client ignores both
        if body["metadata"].get("finalizers"):
            now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            body["metadata"].setdefault("deletionTimestamp", now)
            _bump(body)
        else:
            del self.sessions[(namespace, name)]

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
        self.claims[(namespace, name)] = self._merged(self.claims.get((namespace, name)), patch)

    async def delete_claim(self, namespace: str, name: str, uid: str | None = None) -> bool:
        self.writes.append(("delete-claim", name))
        return self.claims.pop((namespace, name), None) is not None

    async def get_sandbox(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.sandboxes.get((namespace, name)))

    async def patch_sandbox(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any] | None:
        self.writes.append(("patch-sandbox", name))
        self.sandboxes[(namespace, name)] = self._merged(self.sandboxes.get((namespace, name)), patch)
        return copy.deepcopy(self.sandboxes[(namespace, name)])

    @staticmethod
    def _merged(body: dict[str, Any] | None, patch: dict[str, Any]) -> dict[str, Any]:
        if body is None:
            raise ApiException(status=404, reason="Not Found")
        merged = merge_patch(body, patch)
        _bump(merged)
        return dict(merged)

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


def _in(namespace: str | None) -> str:
    return f" in {namespace}" if namespace else ""


def _of(body: dict[str, Any], namespace: str | None) -> bool:
    return namespace is None or (body.get("metadata") or {}).get("namespace") == namespace
