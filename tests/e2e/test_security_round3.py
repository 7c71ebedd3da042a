"""Issue 28 end to end: the third round's attacks and defects, against the real API server and operator
(pure rules are unit-tested beside the code they test)."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentsession_operator.kube import client as kube_client
from devcluster.cluster import Cluster

pytestmark = pytest.mark.e2e

NOTHING_SELECTOR = "agentsession.dev/e2e-selects-nothing=yes"


def test_an_empty_metadata_only_list_is_an_empty_list(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 13. With no AgentSessionPolicy at all, the 5-minute policy resync failed ('NoneType' object is
    not iterable): the API server answers a metadata-only list of nothing with `items: null`, and the resync
    that exists to drop a policy deleted while the watch was down never ran. A selector that matches nothing
    gets the same answer from the real API server whatever other tests left behind."""
    raw = cluster.kubectl(
        "get",
        "--raw",
        f"/apis/agentsession.dev/v1alpha1/agentsessionpolicies?labelSelector={NOTHING_SELECTOR}",
    )
    assert "items" in json.loads(raw.stdout)  # the plain JSON answer (the metadata-only one is what we decode)
    listed = dict(kube_client._LISTED)
    listed["nothing"] = (*listed["policies"][:3], NOTHING_SELECTOR)
    monkeypatch.setattr(kube_client, "_LISTED", listed)

    async def list_nothing() -> tuple[list[dict[str, object]], str]:
        kube = await kube_client.Kube.connect()
        try:
            return await kube.list_versioned("nothing")
        finally:
            await kube.close()

    keys, version = asyncio.run(list_nothing())
    assert keys == [] and version
