"""The cluster's ServiceAccount keys (`/openid/v1/jwks`), fetched through the Kubernetes API client and cached
per API server: what `pod_identity` verifies a sandbox pod's identity token with (sync; the async API
resolves endpoints in a worker thread)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Final

from .errors import UnverifiedPod
from .pod_identity import ClusterKeys

JWKS_PATH: Final = "/openid/v1/jwks"
KEYS_MAX_AGE: Final = 600.0
"""Seconds a fetched key set is used before it is fetched again (the API server rotates keys rarely; a token
signed by a key not in the set fetches it again at once, at most every `REFETCH_INTERVAL`)."""
REFETCH_INTERVAL: Final = 10.0

_CACHE: dict[str, ClusterKeys] = {}
_LOCK = threading.Lock()


def keys_of(api_client: Any) -> ClusterKeys:
    """The key set of `api_client`'s cluster, cached per API server for `KEYS_MAX_AGE` (sooner once a token
    named a key the set lacks)."""
    host = str(getattr(getattr(api_client, "configuration", None), "host", ""))
    now = time.monotonic()
    with _LOCK:
        cached = _CACHE.get(host)
    if cached is not None:
        age = now - cached.fetched_at
        if age < REFETCH_INTERVAL or (age < KEYS_MAX_AGE and not cached.stale):
            return cached
    try:
        keys = ClusterKeys.parse(json.loads(read_jwks(api_client)), now, host)
    except Exception as exc:  # the API client's own errors: the check cannot be made, so nothing is sent
        raise UnverifiedPod(
            f"could not read the cluster's ServiceAccount keys at {JWKS_PATH} to verify the sandbox pod's "
            f"identity ({exc}); allow `get` on that URL (docs/security.md, pod identity)"
        ) from exc
    with _LOCK:
        _CACHE[host] = keys
    return keys


def read_jwks(api_client: Any) -> bytes:
    """The API server's `/openid/v1/jwks` (the kubernetes client's OpenidApi: its call signatures differ
    between the client's major versions, this one does not)."""
    from kubernetes import client

    response = client.OpenidApi(api_client).get_service_account_issuer_open_id_keyset(_preload_content=False)
    return bytes(response.data)
