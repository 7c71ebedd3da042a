"""Every Kubernetes API call the operator makes, in one place (over kube/api.py: never blocks the loop).

Objects go in and come out as plain dicts, so the pure logic never sees a client model.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any

from agentsession_api import names
from agentsession_api.timestamps import format_micro_time
from agentsession_operator import constants as c
from agentsession_operator.infra.logs import logger
from agentsession_operator.kube import transport
from agentsession_operator.kube.api import ApiClient, ApiException, load_credentials
from agentsession_operator.kube.projection import session_projection

_log = logger()

_MERGE = {"Content-Type": "application/merge-patch+json"}
_JSON_PATCH = "application/json-patch+json"
LIST_PAGE = 500  # at most this many objects per page of the start-up and resync listings
FIRST_PAGE = 4  # a kind's first page: its objects' size is not known yet (4 of the largest: 6 MiB)
PAGE_BYTES = 4 << 20
"""A listing page's body: about this many bytes. A count alone does not bound a page: a session may be as
large as etcd stores (1.5 MiB) and 500 such decoded at once set a replica's memory (issue 49 item 2)."""
_MANAGED = f"{c.LABEL_MANAGED_BY}={c.MANAGED_BY}"
# A list of metadata only (names, resourceVersions), with plain JSON as the fallback the server may pick.
_METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json"
_LISTED: dict[str, tuple[str, str, str, str | None]] = {  # kind: group, version, plural, label selector
    "policies": (names.GROUP, names.VERSION, names.POLICY_PLURAL, None),
    "sessions": (names.GROUP, names.VERSION, names.SESSION_PLURAL, None),
    "pools": (c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.WARM_POOL_PLURAL, None),
    "templates": (c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.TEMPLATE_PLURAL, None),
    "claims": (c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.CLAIM_PLURAL, _MANAGED),
    "sandboxes": (c.SANDBOX_GROUP, c.SANDBOX_VERSION, c.SANDBOX_PLURAL, None),
    "network_policies": ("networking.k8s.io", "v1", "networkpolicies", _MANAGED),
}
LISTED_RESOURCES = {kind: (group, version, plural) for kind, (group, version, plural, _) in _LISTED.items()}
_NETWORK_POLICY = ("networking.k8s.io", "v1", "networkpolicies")
_CSR = ("certificates.k8s.io", "v1", "certificatesigningrequests")
_CRD = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
_CLAIM = (c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.CLAIM_PLURAL)


def next_page_limit(limit: int, body_bytes: int) -> int:
    """The next page's object count after a page of ``limit`` objects took ``body_bytes``: what fits in
    PAGE_BYTES at that size, growing at most 4x a page (a few large objects among small ones), at least 1,
    at most LIST_PAGE."""
    fit = limit * PAGE_BYTES // max(body_bytes, 1)
    return max(1, min(fit, limit * 4, LIST_PAGE))


def resource_path(
    group: str, version: str, plural: str, namespace: str | None = None, name: str | None = None, sub: str = ""
) -> str:
    """The REST path of a kind (the core group is ""), one namespace's or cluster-wide, one object, a subresource."""
    path = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespace:
        path += f"/namespaces/{namespace}"
    path += f"/{plural}"
    if name:
        path += f"/{name}"
    return f"{path}/{sub}" if sub else path


def delete_options(uid: str | None = None, propagation: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if uid:
        body["preconditions"] = {"uid": uid}
    if propagation:
        body["propagationPolicy"] = propagation
    return body


def status_json_patch(status: dict[str, Any], uid: str, has_status: bool) -> list[dict[str, Any]]:
    """The merge patch ``{"status": status}`` as a JSON patch that first tests metadata.uid.

    Same effect for the top-level members the operator writes (each one whole): ``add`` replaces an existing
    member, and a None (a merge patch's delete) is added as null, which the API server prunes from a
    structural schema's non-nullable field, so it is removed whether it was there or not.
    """
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": uid}]
    if not has_status:
        return [*ops, {"op": "add", "path": "/status", "value": {k: v for k, v in status.items() if v is not None}}]
    return ops + [{"op": "add", "path": f"/status/{_pointer(key)}", "value": value} for key, value in status.items()]


def _pointer(key: str) -> str:
    """One JSON pointer reference token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


class Kube:
    """A thin async facade over the API: sessions, policies, claims, sandboxes, pools, CRDs, config, events."""

    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client
        self._page_limits: dict[tuple[str, bool], int] = {}  # learnt per kind (next_page_limit)

    @classmethod
    async def connect(cls) -> Kube:
        api_client = ApiClient(load_credentials())
        transport.install(api_client)  # a timeout, Retry-After, client-go's retries
        return cls(api_client)

    async def close(self) -> None:
        await self.api_client.close()

    # ---- generic helpers ---------------------------------------------------------------------
    async def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        answer = await self.api_client.call(method, path, **kwargs)
        return dict(answer) if isinstance(answer, dict) else {}

    async def _read(self, path: str, missing: tuple[int, ...] = (404,)) -> dict[str, Any] | None:
        """GET one object; None when the API server answers one of `missing`."""
        try:
            return await self._call("GET", path)
        except ApiException as exc:
            if exc.status in missing:
                return None
            raise

    async def _get(self, group: str, version: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._read(resource_path(group, version, plural, namespace, name))

    async def _create(self, group: str, version: str, plural: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """Create `body` in its namespace; None when an object of that name exists already (409)."""
        namespace = body["metadata"]["namespace"]
        try:
            return await self._call("POST", resource_path(group, version, plural, namespace), body=body)
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise

    async def _patch(self, path: str, patch: Any, content_type: str = _MERGE["Content-Type"]) -> dict[str, Any]:
        return await self._call("PATCH", path, body=patch, content_type=content_type)

    async def _list(
        self, group: str, version: str, plural: str, namespace: str | None, selector: str | None = None
    ) -> list[dict[str, Any]]:
        query = [("labelSelector", selector)] if selector else []
        result = await self._call("GET", resource_path(group, version, plural, namespace), query=query)
        return list(result.get("items") or [])  # an empty list may answer `items: null`

    async def list_page(
        self,
        kind: str,
        token: str | None = None,
        *,
        metadata_only: bool = False,
        namespace: str | None = None,
        selector: str | None = None,
    ) -> tuple[list[dict[str, Any]], str, str | None]:
        """One page of every object of `kind` (ours only for claims and NetworkPolicies), cluster-wide or of
        `namespace`, matching `selector`: its items, the list's resourceVersion and the next page's token
        (None: the last). In pages bounded in bytes (next_page_limit, learnt per kind): one listing of
        every session, claim and Sandbox decoded at once sets the operator's peak memory, which is what a
        node must hold. `metadata_only`: the API server sends each object's metadata only
        (PartialObjectMetadataList)."""
        group, version, plural, ours = _LISTED[kind]
        learnt = (kind, metadata_only)
        limit = self._page_limits.get(learnt, min(FIRST_PAGE, LIST_PAGE))
        query: list[tuple[str, Any]] = [("limit", limit)]
        selectors = [s for s in (ours, selector) if s]
        if selectors:
            query.append(("labelSelector", ",".join(selectors)))
        if token:
            query.append(("continue", token))
        answer = await self.api_client.request(
            "GET",
            resource_path(group, version, plural, namespace),  # the generic path serves built-in kinds too
            query=query,
            accept=_METADATA_ONLY if metadata_only else "application/json",
        )
        self._page_limits[learnt] = next_page_limit(limit, len(answer.data))  # the body's size sets the next count
        page = json.loads(answer.data)
        meta = page.get("metadata") or {}
        items = page.get("items") or []  # a metadata-only list of nothing answers `items: null`
        return list(items), str(meta.get("resourceVersion") or ""), meta.get("continue") or None

    async def list_versioned(self, kind: str) -> tuple[list[dict[str, Any]], str]:
        """The name of every object of `kind` and the list's resourceVersion: what a relist sees, for dropping
        cached objects deleted while a watch was down (kube/resync). Metadata only (PartialObjectMetadataList):
        the API server sends no spec or status and we decode none (this listing runs every resync period
        and at each relist)."""
        keys: list[dict[str, Any]] = []
        snapshot, token = "", None
        while True:
            items, version, token = await self.list_page(kind, token, metadata_only=True)
            snapshot = snapshot or version
            keys += [
                {"metadata": {"namespace": i["metadata"].get("namespace"), "name": i["metadata"]["name"]}}
                for i in items
            ]
            if not token:
                return keys, snapshot

    # ---- sessions ---------------------------------------------------------------
    async def get_session(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get(names.GROUP, names.VERSION, names.SESSION_PLURAL, namespace, name)

    async def list_sessions(self, namespace: str | None = None, selector: str | None = None) -> list[dict[str, Any]]:
        """Every session (of `namespace`, matching `selector`) as the cache keeps it (session_projection),
        read live in pages bounded in bytes, each projected before the next is read: a tenant's maximal
        sessions never sit decoded together, nor whole (issue 49 item 2)."""
        listed: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            items, _, token = await self.list_page("sessions", token, namespace=namespace, selector=selector)
            listed += [session_projection(item) for item in items]
            if not token:
                return listed

    async def patch_session_status(
        self, namespace: str, name: str, status: dict[str, Any], uid: str | None = None, has_status: bool = True
    ) -> dict[str, Any] | None:
        """Merge ``status`` into `/status` only: the operator never writes spec (GitOps owns it).

        With ``uid``, the write lands only on that session: a JSON patch whose first op tests metadata.uid
        (on `/status` a merge patch's metadata.uid is silently ignored), so a status computed for a session
        that was deleted and created again under the same name never reaches the new one. ``has_status``:
        whether the session has a status yet (the JSON patch adds members to it, or adds it whole). None:
        the session is gone, or is another one now.
        """
        if uid is None:
            return await self._patch_status(namespace, name, {"status": status}, _MERGE["Content-Type"])
        return await self._patch_status_of(namespace, name, status, uid, has_status, tries=2)

    async def _patch_status_of(
        self, namespace: str, name: str, status: dict[str, Any], uid: str, has_status: bool, tries: int
    ) -> dict[str, Any] | None:
        """The UID-tested JSON patch, tried twice. The second try is shaped as the server's session is now: a
        status can appear or go between a refused write and the read after it (another writer, an admin's
        `kubectl patch --subresource=status`), so the read cannot tell that from the body's own refusal."""
        try:
            return await self._patch_status(namespace, name, status_json_patch(status, uid, has_status), _JSON_PATCH)
        except ApiException as exc:
            if exc.status != 422:
                raise
            # A JSON patch answers 422 for a failed test op, a missing /status and a schema refusal alike.
            current = await self.get_session(namespace, name)
            if current is None or (current.get("metadata") or {}).get("uid") != uid:
                return None  # another session holds the name now
            if tries == 1:
                raise  # refused as the server has it now: the body itself
        has_status = current.get("status") is not None
        return await self._patch_status_of(namespace, name, status, uid, has_status, tries - 1)

    async def _patch_status(self, namespace: str, name: str, body: Any, content_type: str) -> dict[str, Any] | None:
        path = resource_path(names.GROUP, names.VERSION, names.SESSION_PLURAL, namespace, name, "status")
        try:
            return await self._patch(path, body, content_type)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def delete_session(self, namespace: str, name: str, uid: str) -> None:
        path = resource_path(names.GROUP, names.VERSION, names.SESSION_PLURAL, namespace, name)
        try:
            await self._call("DELETE", path, body=delete_options(uid))
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    async def request_token(self, namespace: str, account: str, audience: str, seconds: int) -> str:
        """A token of ServiceAccount ``namespace/account`` for ``audience`` (the TokenRequest API): the
        operator's own, for one node agent (kube/node_agent.NodeTokens)."""
        request: dict[str, Any] = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": [audience], "expirationSeconds": seconds},
        }
        path = resource_path("", "v1", "serviceaccounts", namespace, account, "token")
        answer = await self._call("POST", path, body=request)
        return str((answer.get("status") or {}).get("token") or "")

    # ---- the node agents' certificates (kube/agent_certificates.py) --------------------------
    async def answer_certificate_request(
        self, csr: dict[str, Any], approved: bool, reason: str, message: str
    ) -> dict[str, Any] | None:
        """Approve or deny a CertificateSigningRequest (its approval, at the version read): the request as
        written, or None when another replica answered first (409) or it is gone (404)."""
        condition = {
            "type": "Approved" if approved else "Denied",
            "status": "True",
            "reason": reason,
            "message": message,
        }
        status = dict(csr.get("status") or {})
        status["conditions"] = [*(status.get("conditions") or []), condition]
        body = {**csr, "status": status}
        path = resource_path(_CSR[0], _CSR[1], _CSR[2], None, csr["metadata"]["name"], "approval")
        try:
            return await self._call("PUT", path, body=body)
        except ApiException as exc:
            if exc.status in (404, 409):
                return None
            raise

    async def issue_certificate(self, csr: dict[str, Any], certificate_pem: bytes) -> bool:
        """Write the signed certificate into an approved request (at the version read); False when another
        replica wrote first or it is gone."""
        status = {**(csr.get("status") or {}), "certificate": base64.b64encode(certificate_pem).decode()}
        path = resource_path(_CSR[0], _CSR[1], _CSR[2], None, csr["metadata"]["name"], "status")
        try:
            await self._call("PUT", path, body={**csr, "status": status})
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise
        return True

    # ---- who a caller is, and what it may (the router credential issuer) -----------------------
    async def review_token(self, token: str) -> dict[str, Any] | None:
        """The user a bearer token authenticates as (TokenReview: ``username``, ``uid``, ``groups``,
        ``extra``), or None when the API server does not authenticate it."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        answer = await self._call("POST", resource_path("authentication.k8s.io", "v1", "tokenreviews"), body=body)
        status = answer.get("status") or {}
        return dict(status.get("user") or {}) if status.get("authenticated") else None

    async def user_may(self, user: dict[str, Any], attributes: dict[str, str]) -> bool:
        """Whether RBAC (any authorizer) allows ``user`` (a TokenReview's user) ``attributes``
        (SubjectAccessReview resourceAttributes)."""
        spec = {
            "user": user.get("username", ""),
            "uid": user.get("uid", ""),
            "groups": list(user.get("groups") or []),
            "extra": dict(user.get("extra") or {}),
            "resourceAttributes": attributes,
        }
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        answer = await self._call(
            "POST", resource_path("authorization.k8s.io", "v1", "subjectaccessreviews"), body=body
        )
        return bool((answer.get("status") or {}).get("allowed"))

    async def list_policies(self, namespace: str | None) -> list[dict[str, Any]]:
        return await self._list(names.GROUP, names.VERSION, names.POLICY_PLURAL, namespace)

    async def patch_policy_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        path = resource_path(names.GROUP, names.VERSION, names.POLICY_PLURAL, namespace, name, "status")
        try:
            await self._patch(path, {"status": status})
        except ApiException as exc:
            if exc.status != 404:
                raise

    # ---- agent-sandbox objects ---------------------------------------------------------------
    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get(c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.CLAIM_PLURAL, namespace, name)

    async def create_claim(self, claim: dict[str, Any]) -> dict[str, Any] | None:
        """Create the claim; None when one of that name already exists (the caller checks its owner)."""
        return await self._create(c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.CLAIM_PLURAL, claim)

    async def patch_claim(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        await self._patch(
            resource_path(c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.CLAIM_PLURAL, namespace, name), patch
        )

    async def delete_claim(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """Delete (background cascade: the GC removes Sandbox, Pod, PVCs); False when already gone."""
        path = resource_path(c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.CLAIM_PLURAL, namespace, name)
        try:
            await self._call("DELETE", path, body=delete_options(uid, "Background"))
            return True
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise

    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """Pods of one namespace by label (only the node agent's, in the operator's own namespace)."""
        return await self._list("", "v1", "pods", namespace, selector)

    async def get_sandbox(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get(c.SANDBOX_GROUP, c.SANDBOX_VERSION, c.SANDBOX_PLURAL, namespace, name)

    async def patch_sandbox(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any] | None:
        """The Sandbox as the API server wrote it (the caller caches it: the watch may show it later)."""
        path = resource_path(c.SANDBOX_GROUP, c.SANDBOX_VERSION, c.SANDBOX_PLURAL, namespace, name)
        return await self._patch(path, patch) or None

    # ---- a fork's source volumes (read only) ---------------------------------------------------
    async def get_pvc(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._read(resource_path("", "v1", "persistentvolumeclaims", namespace, name))

    async def get_storage_class(self, name: str) -> dict[str, Any] | None:
        return await self._read(resource_path("storage.k8s.io", "v1", "storageclasses", None, name))

    async def list_warm_pools(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return await self._list(c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.WARM_POOL_PLURAL, namespace)

    async def list_templates(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return await self._list(c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.TEMPLATE_PLURAL, namespace)

    async def get_warm_pool(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get(c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.WARM_POOL_PLURAL, namespace, name)

    async def crd_served_versions(self, name: str) -> list[str] | None:
        """The served versions of a CRD (None when it is not installed)."""
        crd = await self.get_crd(name, missing=(403, 404))
        if crd is None:
            return None
        return [str(v["name"]) for v in (crd.get("spec") or {}).get("versions") or [] if v.get("served")]

    async def get_crd(self, name: str, missing: tuple[int, ...] = (404,)) -> dict[str, Any] | None:
        """A CustomResourceDefinition; None when the API server answers one of `missing`."""
        return await self._read(
            resource_path("apiextensions.k8s.io", "v1", "customresourcedefinitions", None, name), missing
        )

    # ---- the sessions' NetworkPolicies ------------------------------------------------------
    async def get_network_policy(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get(*_NETWORK_POLICY, namespace, name)

    async def create_network_policy(self, manifest: dict[str, Any]) -> dict[str, Any] | None:
        """Create it; None when one of that name exists already (the caller checks its owner)."""
        return await self._create(*_NETWORK_POLICY, manifest)

    async def replace_network_policy(self, current: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
        """PUT the desired spec and labels over ``current`` (its resourceVersion: a concurrent change is a 409
        and the pass is retried, never overwritten blindly)."""
        meta = dict(current["metadata"])
        meta["labels"] = {**(meta.get("labels") or {}), **manifest["metadata"]["labels"]}
        body = {**manifest, "metadata": meta}
        path = resource_path(*_NETWORK_POLICY, meta["namespace"], meta["name"])
        return await self._call("PUT", path, body=body)

    # ---- agent-sandbox's label allowlist -----------------------------------------------------
    async def allowed_label_domains(self, namespace: str, name: str) -> list[str]:
        """The domains agent-sandbox accepts for pod labels, read from the same ConfigMap it reads."""
        cm = await self._read(resource_path("", "v1", "configmaps", namespace, name), missing=(403, 404))
        if cm is None:
            return list(names.DEFAULT_ALLOWED_LABEL_DOMAINS)
        raw = (cm.get("data") or {}).get("allowed-label-domains", "")
        domains = [d.strip().lower() for d in raw.replace("\n", ",").split(",") if d.strip()]
        return domains or list(names.DEFAULT_ALLOWED_LABEL_DOMAINS)

    async def publish_config_map(self, namespace: str, name: str, data: dict[str, str]) -> bool:
        """Merge ``data`` into a shipped ConfigMap (RBAC: patch on that name only); False when it is absent."""
        try:
            await self._patch(resource_path("", "v1", "configmaps", namespace, name), {"data": data})
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # ---- the admission webhook's certificate and configuration -------------------------------
    async def get_secret_data(self, namespace: str, name: str) -> tuple[dict[str, str], str] | None:
        """(data, resourceVersion) of one Secret (RBAC: get on that name only); None when absent."""
        secret = await self._read(resource_path("", "v1", "secrets", namespace, name))
        if secret is None:
            return None
        return dict(secret.get("data") or {}), str((secret.get("metadata") or {}).get("resourceVersion") or "")

    async def fill_secret(self, namespace: str, name: str, data: dict[str, str], resource_version: str) -> bool:
        """Write ``data`` only if the Secret is still at ``resource_version``; False when another replica won."""
        patch = {"metadata": {"resourceVersion": resource_version}, "data": data}
        try:
            await self._patch(resource_path("", "v1", "secrets", namespace, name), patch)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def patch_validating_webhooks(self, name: str, patch: dict[str, Any]) -> bool:
        """Strategic merge (webhooks merge by name); False when the configuration does not exist."""
        path = resource_path("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", None, name)
        try:
            await self._patch(path, patch, "application/strategic-merge-patch+json")
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # ---- events ------------------------------------------------------------------------------
    async def event(
        self, obj: dict[str, Any], reason: str, message: str, type_: str = "Normal", action: str = "Reconcile"
    ) -> None:
        """An events.k8s.io/v1 Event about `obj` (best effort: an event must never fail a reconcile)."""
        meta = obj["metadata"]
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}-", "namespace": meta["namespace"]},
            "eventTime": format_micro_time(dt.datetime.now(dt.UTC)),
            "reportingController": "agentsession.dev/operator",
            "reportingInstance": "agentsession-operator",
            "action": action,
            "reason": reason,
            "note": message[:1024],
            "type": type_,
            "regarding": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
        }
        try:
            await self._create("events.k8s.io", "v1", "events", body)
        except Exception as exc:  # a reset connection too: it ran in a task nobody awaits
            _log.warning("could not post an event", reason=reason, error=str(exc)[:300])
