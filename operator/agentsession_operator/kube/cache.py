"""What the watches have seen, kept current by the event handlers: the reconciler reads it before the API."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentsession_operator.decisions import hibernate, template_identity, template_policy
from agentsession_operator.decisions.network import host_network
from agentsession_operator.kube.places import Places
from agentsession_operator.kube.projection import child_projection, sandbox_projection, session_projection

Key = tuple[str, str]  # (namespace, name)


def _resource_version(body: Mapping[str, Any]) -> int:
    # Opaque by contract, but etcd revisions in practice; unparsable values never block an update.
    try:
        return int(body["metadata"].get("resourceVersion", 0))
    except (TypeError, ValueError):
        return 0


def _newer_or_same(known: Mapping[str, Any] | None, body: Mapping[str, Any]) -> bool:
    """The cache's copy is at least as new as `body`: keep it. The same resourceVersion is the same object,
    and keeping the copy built first (at start, prime's) instead of a fresh one per listed event keeps the
    long-lived cache from being strewn among a listing's short-lived bodies (memory a replica that took
    over many sessions never gave back)."""
    if known is None:
        return False
    return same_version(known, body) or _resource_version(known) > _resource_version(body)


def same_version(known: Mapping[str, Any] | None, body: Mapping[str, Any]) -> bool:
    """`known` is `body` at the very same resourceVersion (neither lacks one)."""
    version = ((known or {}).get("metadata") or {}).get("resourceVersion")
    return bool(version) and version == (body.get("metadata") or {}).get("resourceVersion")


class ByNamespace(dict[Key, dict[str, Any]]):
    """A dict keyed by (namespace, name) that also keeps each namespace's entries apart, so a namespace's
    sessions are found without scanning every namespace's (and a shard of namespaces can be handed its
    own). Reads are a plain dict's; every write goes through the methods below, which keep the index."""

    def __init__(self) -> None:
        super().__init__()
        self._spaces: dict[str, dict[Key, dict[str, Any]]] = {}

    def __setitem__(self, key: Key, value: dict[str, Any]) -> None:
        super().__setitem__(key, value)
        self._spaces.setdefault(key[0], {})[key] = value

    def __delitem__(self, key: Key) -> None:
        super().__delitem__(key)
        space = self._spaces[key[0]]
        del space[key]
        if not space:
            del self._spaces[key[0]]

    def pop(self, key: Key, *default: Any) -> Any:
        if key in self:
            value = self[key]
            del self[key]
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def setdefault(self, key: Key, default: dict[str, Any]) -> dict[str, Any]:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def popitem(self) -> tuple[Key, dict[str, Any]]:
        key = next(reversed(self.keys()))
        return key, self.pop(key)

    def clear(self) -> None:
        super().clear()
        self._spaces.clear()

    def in_namespace(self, namespace: str) -> Mapping[Key, dict[str, Any]]:
        """The entries of one namespace (a live view: do not write through it)."""
        return self._spaces.get(namespace) or {}

    def namespaces(self) -> list[str]:
        return list(self._spaces)


SANDBOX_SPEC_UNUSED = ("podTemplate", "volumeClaimTemplates")
MAX_TOMBSTONES = 10_000  # deleted session UIDs remembered (~1 MB at most); the oldest are dropped first


@dataclass
class Cache:
    """What the watches have seen (kept current by the event handlers), keyed by (namespace, name)."""

    claims: dict[Key, dict[str, Any]] = field(default_factory=dict)
    sandboxes: dict[Key, dict[str, Any]] = field(default_factory=dict)
    pools: dict[Key, int] = field(default_factory=dict)  # warm pools seen, with their resourceVersion
    pool_templates: dict[Key, str] = field(default_factory=dict)  # each warm pool's SandboxTemplate name
    templates: dict[Key, dict[str, Any]] = field(default_factory=dict)
    """SandboxTemplates, slim: metadata and the spec fields decisions/template_policy.py reads (few objects)."""
    policies: dict[str, dict[str, dict[str, Any]]] = field(default_factory=lambda: defaultdict(dict))
    sessions: ByNamespace = field(default_factory=ByNamespace)
    """The latest body seen per session, indexed by namespace."""
    network_policies: dict[Key, dict[str, Any]] = field(default_factory=dict)  # the operator's own, by label
    forks: set[Key] = field(default_factory=set)
    """The cached sessions that are forks (spec.forkFrom): every session event looks for forks waiting on
    it, and a scan of every session per event grows with the number of sessions."""
    places: Places = field(default_factory=Places)
    """The sessions holding a place under maxSessionsPerNamespace, sorted per namespace (kube/places.py)."""
    loaded: bool = False
    """Policies and warm pools were listed once: before that no session is acted on (a session judged
    without its policy would get a claim the policy forbids)."""
    deleted: dict[str, None] = field(default_factory=dict)
    """UIDs of sessions known to be deleted (their DELETED event, a relist without them, a status write
    answered 404), oldest first, at most MAX_TOMBSTONES: a body of one of them (a stale event, a pass that
    read it before the deletion) is never cached or acted on again."""

    def session_deleted(self, uid: str | None) -> None:
        if not uid:
            return
        self.deleted.pop(uid, None)
        self.deleted[uid] = None
        while len(self.deleted) > MAX_TOMBSTONES:
            del self.deleted[next(iter(self.deleted))]

    def is_deleted(self, body: Mapping[str, Any]) -> bool:
        return (body.get("metadata") or {}).get("uid") in self.deleted

    def remember_session(self, key: Key, body: dict[str, Any]) -> None:
        """Keep the newest body: a watch event can arrive after our own, newer write. Never a deleted one."""
        if self.is_deleted(body):
            return
        if _newer_or_same(self.sessions.get(key), body):
            return
        self.sessions[key] = session_projection(body)
        self.places.update(key, self.sessions[key])
        if ((body.get("spec") or {}).get("forkFrom") or {}).get("name"):
            self.forks.add(key)
        else:
            self.forks.discard(key)

    def forget_session(self, key: Key) -> None:
        self.sessions.pop(key, None)
        self.places.update(key, None)
        self.forks.discard(key)

    def remember_claim(self, key: Key, body: Mapping[str, Any]) -> None:
        """The newest: our create's answer can arrive after the watch delivered the claim Ready (a slow API
        server); storing the older answer left the session Provisioning for good (no later event came)."""
        if _newer_or_same(self.claims.get(key), body):
            return
        self.claims[key] = child_projection(body)

    def remember_network_policy(self, key: Key, body: Mapping[str, Any]) -> None:
        if _newer_or_same(self.network_policies.get(key), body):
            return
        self.network_policies[key] = child_projection(body)

    def remember_sandbox(self, key: Key, body: Mapping[str, Any]) -> None:
        if _newer_or_same(self.sandboxes.get(key), body):
            return
        small = sandbox_projection(body, SANDBOX_SPEC_UNUSED)
        if host_network(body):  # the one field of the pod template a decision reads (NetworkIsolated)
            small["spec"]["podTemplate"] = {"spec": {"hostNetwork": True}}
        # What a wake compares with its checkpoint's (issue 49 item 7): the pod spec's digest, not the spec.
        small.setdefault("spec", {})[hibernate.CACHED_POD_SPEC_DIGEST] = hibernate.pod_spec_digest(body)
        self.sandboxes[key] = small

    def hibernated_bytes(self, namespace: str, excluding_uid: str = "") -> int:
        """The checkpoint bytes the namespace's hibernated sessions keep (status.hibernation.sizeBytes of
        those hibernated), but the session ``excluding_uid``'s: a policy's limits.maxHibernatedSize bounds
        them. Read only when a session hibernates under such a policy."""
        total = 0
        for body in self.scan_bodies_in(namespace):
            record = (body.get("status") or {}).get("hibernation") or {}
            if record.get("hibernated") and (body.get("metadata") or {}).get("uid") != excluding_uid:
                size = record.get("sizeBytes")
                total += size if isinstance(size, int) and size > 0 else 0
        return total

    def remember_pool(self, key: Key, body: Mapping[str, Any]) -> None:
        self.pools[key] = _resource_version(body)
        template = ((body.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name")
        if isinstance(template, str) and template:
            self.pool_templates[key] = template
        else:
            self.pool_templates.pop(key, None)

    def forget_pool(self, key: Key) -> None:
        self.pools.pop(key, None)
        self.pool_templates.pop(key, None)

    def remember_template(self, key: Key, body: Mapping[str, Any]) -> None:
        spec = body.get("spec") or {}
        self.templates[key] = {
            "metadata": {k: (body.get("metadata") or {}).get(k) for k in ("name", "namespace", "resourceVersion")},
            "spec": {
                **{k: spec[k] for k in template_policy.KEPT_SPEC if k in spec},
                # Not the pod template (tenants size it): only whether it gives pods their identity token.
                template_identity.KEPT: template_identity.mounts_identity(body),
            },
        }

    def template_policy_of_pool(self, key: Key) -> template_policy.TemplatePolicy | None:
        """The managed NetworkPolicy of the template behind a warm pool (None: no template known)."""
        template = self.pool_templates.get(key)
        return template_policy.of_template(self.templates.get((key[0], template))) if template else None

    def template_identity_of_pool(self, key: Key) -> template_identity.TemplateIdentity | None:
        """Whether the template behind a warm pool gives its pods their identity token (None: not known)."""
        template = self.pool_templates.get(key)
        return template_identity.of_template(self.templates.get((key[0], template))) if template else None

    def sessions_in(self, namespace: str) -> list[Key]:
        return list(self.sessions.in_namespace(namespace))

    def bodies_in(self, namespace: str) -> list[dict[str, Any]]:
        """The cached sessions of a namespace."""
        return list(self.scan_bodies_in(namespace))

    def scan_bodies_in(self, namespace: str) -> Iterator[dict[str, Any]]:
        """The same, lazily: a scan of every cached session, paid only if the caller reads it (the quota
        checks at every pass and session event need it only under a maxSessionsPerLabel cap). The namespace
        index makes it a scan of that namespace's sessions only."""
        return (body for body in self.sessions.in_namespace(namespace).values())

    def forks_in(self, namespace: str) -> list[Key]:
        """The cached forks of one namespace."""
        return [key for key in self.forks if key[0] == namespace]


def version_of(value: Mapping[str, Any] | int) -> int:
    return value if isinstance(value, int) else _resource_version(value)


def unseen_deletions(cached: Mapping[Key, Mapping[str, Any] | int], listed: set[Key], list_version: str) -> list[Key]:
    """Cached keys a list no longer has and that it should have had: deleted while no watch saw it.

    kopf relists after a watch ends with 410 Gone (or any reconnect without a resourceVersion) and
    delivers what it lists, but no DELETED event for what is gone: without this, a deleted policy or
    pool stayed in force until the operator restarted. A cached object newer than the list (a watch
    event that arrived after the list's snapshot) is kept: the list could not have seen it.
    """
    try:
        snapshot = int(list_version)
    except ValueError:
        return []  # an opaque version: cannot tell what is older, drop nothing
    return [key for key, value in cached.items() if key not in listed and version_of(value) <= snapshot]
