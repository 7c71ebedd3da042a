"""names.SCHEMA_REVISION moves with the generated CRD schemas (the operator's preflight relies on it).

Each revision's fingerprint (the CRDs' specs without descriptions) is recorded here. A schema change
without a new revision fails below: bump SCHEMA_REVISION in api/agentsession_api/names.py, run
`make crds`, and add the fingerprint this test prints.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agentsession_api import crdgen, names

FINGERPRINTS = {
    1: "972267f8da8ede07e26316caf75faa263bdda24e9cfcf7e8d5ef43e2f4709441",
    2: "52635afccd34ef85f8b95337d2e51eabd1f8a33f84dd8dd05eb8c4eaf8758b60",  # Hibernate, maxSessionsPerNamespace
    3: "bc290712e5148a65cc381b5cb06f84a6e79df99f5e1f45fceb481bc266ed28fb",  # countAcrossValues, hibernation
    4: "a925c8458715cfc9a3d3da447df4d5d57893549a88bade2ed68f2d8538d9c1be",  # allowHibernate, maxCheckpointSize
    5: "dbb37a61dc22fee4ea51f90bf89a3e5563e7fec0ba3d70e71fa11b6b988b68cd",  # admittedLabels, maxHibernatedSize
    6: "f723a2986ca67bd3cca5f79e85374b80e7f17e6fcdf8d78332733734057738f9",  # hibernation.podSpecDigest
}


def _without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


def fingerprint() -> str:
    specs = [_without_descriptions(crd["spec"]) for crd in (crdgen.session_crd(), crdgen.policy_crd())]
    return hashlib.sha256(json.dumps(specs, sort_keys=True).encode()).hexdigest()


def test_the_schema_revision_matches_the_schemas() -> None:
    got = fingerprint()
    assert FINGERPRINTS.get(names.SCHEMA_REVISION) == got, (
        f"the CRD schemas changed: set SCHEMA_REVISION = {max(FINGERPRINTS) + 1} in api/agentsession_api/names.py, "
        f"run `make crds`, and add {max(FINGERPRINTS) + 1}: {got!r} to FINGERPRINTS here"
    )


def test_revisions_only_grow() -> None:
    assert max(FINGERPRINTS) == names.SCHEMA_REVISION


def test_every_generated_crd_carries_the_revision() -> None:
    for crd in (crdgen.session_crd(), crdgen.policy_crd()):
        assert crd["metadata"]["annotations"][names.ANNOTATION_SCHEMA_REVISION] == str(names.SCHEMA_REVISION)
