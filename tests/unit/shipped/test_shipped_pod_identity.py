"""The shipped SandboxTemplates give their pods the identity volume the clients ask for (issue 51 item 1), in
the shape the contract names (agentsession_api.names): a YAML copy that drifted would leave every client
refusing the pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.manifests import POD_IDENTITY_MOUNT, pod_identity_volume

ROOT = Path(__file__).parents[3]
TEMPLATES = ["examples/00-python-pool.yaml", "config/samples/10-sandboxtemplate-python.yaml"]


def _template(path: str) -> dict[str, Any]:
    docs = yaml.safe_load_all((ROOT / path).read_text())
    return next(d for d in docs if d and d["kind"] == "SandboxTemplate")


@pytest.mark.parametrize("path", TEMPLATES)
def test_the_template_mounts_the_pod_identity_token(path: str) -> None:
    spec = _template(path)["spec"]["podTemplate"]["spec"]
    assert pod_identity_volume() in spec["volumes"]
    assert all(POD_IDENTITY_MOUNT in c["volumeMounts"] for c in spec["containers"])
