"""One issuance: who asks, whether RBAC lets them, which Sandbox, then the tokens. No HTTP here (server.py).

The order matters: nothing about a session (not even whether it exists) is said to a caller before RBAC
has said it may connect to that name.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from agentsession_api import names
from agentsession_api import router_access as ra
from agentsession_operator.issuer import lineage
from agentsession_operator.issuer.tokens import SigningKey, Target, refusal


class IssuerAPI(Protocol):
    """What the issuer reads from the API server (kube/client.Kube has these)."""

    async def review_token(self, token: str) -> dict[str, Any] | None: ...
    async def user_may(self, user: dict[str, Any], attributes: dict[str, str]) -> bool: ...
    async def get_session(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    async def get_sandbox(self, namespace: str, name: str) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]
    outcome: str  # the metric's label

    @classmethod
    def refused(cls, status: int, outcome: str, message: str) -> Answer:
        return cls(status, {"message": message}, outcome)


def parse_requests(body: Any) -> tuple[int, list[tuple[str, str]]] | str:
    """(port, [(method, path), ...]) from a request body, or why it is refused."""
    if not isinstance(body, dict):
        return "expected a JSON object with port and requests"
    port, requests = body.get("port"), body.get("requests")
    if not isinstance(port, int) or isinstance(port, bool):
        return "port: expected an integer"
    if not isinstance(requests, list) or not 1 <= len(requests) <= ra.MAX_REQUESTS:
        return f"requests: expected a list of 1 to {ra.MAX_REQUESTS} {{method, path}} objects"
    wanted: list[tuple[str, str]] = []
    for item in requests:
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("method"), str)
            or not isinstance(item.get("path"), str)
        ):
            return "requests: each item is an object with a string method and a string path"
        method, path = item["method"].upper(), item["path"]
        why = refusal(method, path, port)
        if why:
            return f"requests: {why}"
        wanted.append((method, path))
    return port, wanted


MEMORY = 60.0
"""Seconds an answer of the API server is reused: that a bearer token may connect to a session (TokenReview and
SubjectAccessReview), and which Sandbox is a session's own (by the session's UID and the Sandbox its status
names). A client's download above the inline budget asks for a token of its own path each time, and five API
calls per file cost more than the file. A revoked Role stops new tokens at most this much later (the tokens it
already has live five minutes anyway); a deleted session as soon as the operator's watch sees it (the session is
looked up on every call: the operator's cache, else the API); refusals are never remembered."""
MAX_REMEMBERED = 4096


class Memory:
    """What the API server said, by key, for MEMORY seconds, at most MAX_REMEMBERED keys."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._items: dict[tuple[str, ...], tuple[float, Any]] = {}

    def get(self, key: tuple[str, ...]) -> Any:
        found = self._items.get(key)
        if found is None or found[0] <= self.clock():
            self._items.pop(key, None)
            return None
        return found[1]

    def put(self, key: tuple[str, ...], value: Any) -> None:
        now = self.clock()
        if len(self._items) >= MAX_REMEMBERED:
            self._items = {k: v for k, v in self._items.items() if v[0] > now}
            while len(self._items) >= MAX_REMEMBERED:
                del self._items[next(iter(self._items))]  # the oldest
        self._items[key] = (now + MEMORY, value)


class Seen(Protocol):
    """What the operator's watches hold (kube/cache.Cache: sessions, claims, Sandboxes by (namespace, name)):
    read before the API, so a repeated issuance costs no API call. A miss (a namespace this replica does not
    watch, an object just created, a deleted one) is read live."""

    sessions: Any
    claims: Any
    sandboxes: Any


class Issuer:
    """Mints per-session router tokens for callers RBAC allows (see agentsession_api.router_access)."""

    def __init__(
        self,
        api: IssuerAPI,
        key: SigningKey,
        ttl: int,
        clock: Callable[[], float] = time.time,
        seen: Seen | None = None,
    ) -> None:
        self.api = api
        self.key = key
        self.ttl = ttl
        self.clock = clock
        self.seen = seen
        self.allowed = Memory(time.monotonic)  # (token digest, namespace, name) -> True
        self.lineages = Memory(time.monotonic)  # (namespace, session UID, Sandbox name) -> SessionSandbox

    async def answer(self, bearer: str | None, namespace: str, name: str, body: Any) -> Answer:
        parsed = parse_requests(body)
        if isinstance(parsed, str):
            return Answer.refused(400, "bad_request", parsed)
        port, wanted = parsed
        if not bearer:
            return Answer.refused(401, "unauthenticated", "show your Kubernetes bearer token (Authorization: Bearer)")
        judged = await self._judge(bearer, namespace, name)
        if isinstance(judged, Answer):
            return judged
        own = judged
        expires = int(self.clock()) + self.ttl
        tokens = [
            self.key.mint(Target(namespace, own.name, own.uid, port, method, path), expires) for method, path in wanted
        ]
        return Answer(200, {"sandbox": own.name, "sandboxUID": own.uid, "expires": expires, "tokens": tokens}, "issued")

    async def _judge(self, bearer: str, namespace: str, name: str) -> lineage.SessionSandbox | Answer:
        """Whether the bearer may connect to the session, and the session's own Sandbox; or the refusal."""
        allowed_key = (hashlib.sha256(bearer.encode()).hexdigest(), namespace, name)
        if self.allowed.get(allowed_key) is None:
            refused = await self._authorize(bearer, namespace, name)
            if refused is not None:
                return refused
            self.allowed.put(allowed_key, True)
        session = self._seen("sessions", namespace, name) or await self.api.get_session(namespace, name)
        if session is None:
            return Answer.refused(404, "not_found", f"no AgentSession {namespace}/{name}")
        sandbox_name = lineage.sandbox_name(session)
        lineage_key = (namespace, str((session.get("metadata") or {}).get("uid", "")), sandbox_name or "")
        own = self.lineages.get(lineage_key) if sandbox_name else None
        if own is None:
            sandbox = None
            if sandbox_name:
                sandbox = self._seen("sandboxes", namespace, sandbox_name) or await self.api.get_sandbox(
                    namespace, sandbox_name
                )
            claim_name = lineage.claim_of(sandbox) if sandbox else None
            claim = None
            if claim_name:
                claim = self._seen("claims", namespace, claim_name) or await self.api.get_claim(namespace, claim_name)
            own = lineage.session_sandbox(session, claim, sandbox)
            if own is None:
                return Answer.refused(
                    409,
                    "no_sandbox",
                    f"AgentSession {namespace}/{name} has no sandbox of its own yet: wait until Ready",
                )
            self.lineages.put(lineage_key, own)
        return own

    def _seen(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = getattr(self.seen, kind).get((namespace, name)) if self.seen is not None else None
        return dict(found) if found else None

    async def _authorize(self, bearer: str, namespace: str, name: str) -> Answer | None:
        """Who the bearer is (TokenReview) and whether RBAC lets it connect (SubjectAccessReview); None: it may."""
        user = await self.api.review_token(bearer)
        if user is None:
            return Answer.refused(401, "unauthenticated", "the API server does not authenticate this bearer token")
        attributes = {
            "namespace": namespace,
            "verb": ra.CONNECT_VERB,
            "group": names.GROUP,
            "resource": names.SESSION_PLURAL,
            "subresource": ra.CONNECT_SUBRESOURCE,
            "name": name,
        }
        if await self.api.user_may(user, attributes):
            return None
        who = user.get("username", "?")
        return Answer.refused(
            403,
            "forbidden",
            f"{who} may not {ra.CONNECT_VERB} {ra.CONNECT_RESOURCE} {namespace}/{name}: grant it in a Role of "
            f"{namespace} (apiGroups [{names.GROUP}], resources [{ra.CONNECT_RESOURCE}], verbs [{ra.CONNECT_VERB}])",
        )
