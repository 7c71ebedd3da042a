"""The committed CRDs match the models and are valid structural schemas with bounded CEL cost."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentsession_api import crdgen, durations

REPO = Path(__file__).resolve().parents[3]
CRD_DIR = REPO / "crds"
SESSION_FILE = CRD_DIR / "agentsession.dev_agentsessions.yaml"
POLICY_FILE = CRD_DIR / "agentsession.dev_agentsessionpolicies.yaml"


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def schema_of(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path."""
    if not isinstance(node, dict):
        return
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def ours(path: str) -> bool:
    return path.startswith((".spec", ".status"))


@pytest.fixture(params=[SESSION_FILE, POLICY_FILE], ids=["session", "policy"])
def crd(request: pytest.FixtureRequest) -> dict[str, Any]:
    return load(request.param)


def test_committed_yaml_has_no_drift() -> None:
    diff = crdgen.drift(CRD_DIR)
    assert not diff, "run `python -m agentsession_api.crdgen`:\n" + "".join(diff)


def test_check_mode_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert crdgen.main(["--check", "--out", str(CRD_DIR)]) == 0
    assert crdgen.main(["--out", str(tmp_path)]) == 0
    assert crdgen.main(["--check", "--out", str(tmp_path)]) == 0
    stale = tmp_path / SESSION_FILE.name
    stale.write_text(stale.read_text().replace("Lifetime counted", "Lifetime measured"))
    assert crdgen.main(["--check", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "-" in out and "Lifetime measured" in out and "Lifetime counted" in out


def test_no_banned_keywords(crd: dict[str, Any]) -> None:
    text = yaml.safe_dump(crd)
    for banned in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "title:", "x-kubernetes-preserve-unknown-fields"):
        assert banned not in text, banned
    for path, node in walk(schema_of(crd)):
        assert not ("default" in node and node["default"] is None), path
        assert node.get("additionalProperties") is not False, path


def test_every_value_is_bounded_and_described(crd: dict[str, Any]) -> None:
    for path, node in walk(schema_of(crd)):
        if not ours(path):
            continue
        assert "type" in node, path
        if node["type"] == "string":
            assert "maxLength" in node, f"{path}: string without maxLength"
        if node["type"] == "array":
            assert "maxItems" in node, f"{path}: array without maxItems"
        if node["type"] == "object" and "additionalProperties" in node:
            assert "maxProperties" in node, f"{path}: map without maxProperties"
        if "properties" in node:
            assert node["type"] == "object", path
        if not path.endswith(("[]", "{}")):
            assert node.get("description"), f"{path}: no description"


def test_check_bounds_reports_problems() -> None:
    problems = crdgen.check_bounds(
        {
            "type": "object",
            "description": "x",
            "properties": {
                "s": {"type": "string", "description": "d"},
                "l": {"type": "array", "description": "d", "items": {"type": "string", "maxLength": 1}},
                "m": {"type": "object", "description": "d", "additionalProperties": {"type": "string", "maxLength": 1}},
                "r": {"$ref": "#/x", "description": "d", "type": "object"},
                "n": {"type": "string", "maxLength": 3, "default": None},
            },
        }
    )
    assert ".s: string without maxLength" in problems
    assert ".l: array without maxItems" in problems
    assert ".m: map without maxProperties" in problems
    assert ".r: has $ref" in problems
    assert ".n: has default null" in problems
    assert ".n: has no description" in problems


def test_structural_rejects_real_unions() -> None:
    with pytest.raises(crdgen.SchemaError, match="only Optional"):
        crdgen.structural({"anyOf": [{"type": "string"}, {"type": "integer"}]}, {})


def test_session_names_and_subresources() -> None:
    crd = load(SESSION_FILE)
    assert crd["metadata"]["name"] == "agentsessions.agentsession.dev"
    names = crd["spec"]["names"]
    assert names == {
        "kind": "AgentSession",
        "listKind": "AgentSessionList",
        "plural": "agentsessions",
        "singular": "agentsession",
        "shortNames": ["ags"],
        "categories": ["agentsandbox"],
    }
    assert crd["spec"]["scope"] == "Namespaced"
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert columns["Phase"]["jsonPath"] == ".status.phase"
    assert columns["Pool"]["jsonPath"] == ".spec.warmPoolRef.name"
    assert columns["Pod IP"]["jsonPath"] == ".status.podIPs[0]"
    assert columns["Expires"] == {"name": "Expires", "type": "string", "jsonPath": ".status.expiresAt"}
    assert columns["Age"]["jsonPath"] == ".metadata.creationTimestamp"


def test_policy_names_and_columns() -> None:
    crd = load(POLICY_FILE)
    names = crd["spec"]["names"]
    assert names["plural"] == "agentsessionpolicies" and names["shortNames"] == ["agsp"]
    columns = {c["name"]: c for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert columns["Matched"] == {"name": "Matched", "type": "integer", "jsonPath": ".status.matchedSessions"}
    assert columns["Age"]["type"] == "date"


def spec_schema(path: Path) -> dict[str, Any]:
    return schema_of(load(path))["properties"]["spec"]


def test_session_spec_fields() -> None:
    spec = spec_schema(SESSION_FILE)
    props = spec["properties"]
    assert set(props) == {
        "warmPoolRef",
        "ttl",
        "idleTimeout",
        "idleAction",
        "env",
        "volumeClaimTemplates",
        "labels",
        "podLabels",
        "podAnnotations",
        "suspend",
        "forkFrom",
    }
    assert spec.get("required") is None or "warmPoolRef" not in spec["required"]
    assert spec["default"] == {}
    assert props["idleAction"]["enum"] == ["Delete", "Suspend", "Hibernate"]
    assert "default" not in props["idleAction"]  # a policy default must still be able to apply
    assert props["suspend"]["default"] is False
    env = props["env"]
    assert env["x-kubernetes-list-type"] == "map"
    assert env["x-kubernetes-list-map-keys"] == ["name"]
    assert env["items"]["required"] == ["name", "value"]
    assert env["items"]["properties"]["name"]["pattern"] == "^[-._a-zA-Z][-._a-zA-Z0-9]*$"


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (SESSION_FILE, ("ttl",)),
        (SESSION_FILE, ("idleTimeout",)),
        (POLICY_FILE, ("defaults", "ttl")),
        (POLICY_FILE, ("defaults", "idleTimeout")),
        (POLICY_FILE, ("limits", "maxTtl")),
        (POLICY_FILE, ("limits", "maxIdleTimeout")),
        (POLICY_FILE, ("cleanup", "deleteFinishedAfter")),
    ],
)
def test_durations_have_pattern_and_cel(path: Path, field: tuple[str, ...]) -> None:
    node = spec_schema(path)
    for part in field:
        node = node["properties"][part]
    assert node["pattern"] == durations.DURATION_PATTERN
    assert node["maxLength"] == durations.DURATION_MAX_LENGTH
    (rule,) = node["x-kubernetes-validations"]
    assert "duration(self) > duration('0s')" in rule["rule"]
    assert rule["message"].startswith("spec." + ".".join(field) + " must be a positive duration")


def test_immutability_rules_on_spec() -> None:
    rules = {r["fieldPath"]: r for r in spec_schema(SESSION_FILE)["x-kubernetes-validations"]}
    assert set(rules) == {".warmPoolRef", ".env", ".volumeClaimTemplates", ".forkFrom"}
    assert "has(self.forkFrom) == has(oldSelf.forkFrom)" in rules[".forkFrom"]["rule"]
    pool = rules[".warmPoolRef"]
    assert "oldSelf" in pool["rule"]
    assert "has(self.warmPoolRef) == has(oldSelf.warmPoolRef)" in pool["rule"]
    assert pool["message"] == (
        "spec.warmPoolRef is immutable: delete and recreate the AgentSession to use another pool"
    )


def test_fork_excludes_volume_claim_templates() -> None:
    spec = spec_schema(SESSION_FILE)
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert "!has(self.forkFrom) || !has(self.volumeClaimTemplates)" in rules
    fork = spec["properties"]["forkFrom"]
    assert fork["required"] == ["name"] and set(fork["properties"]) == {"name"}  # no namespace: same one only


def test_label_maps_validate_keys() -> None:
    props = spec_schema(SESSION_FILE)["properties"]
    for name in ("labels", "podLabels", "podAnnotations"):
        rules = [r["rule"] for r in props[name]["x-kubernetes-validations"]]
        assert any("self.all(k, k.matches(" in r for r in rules), name
        assert props[name]["maxProperties"] <= 64
    assert props["labels"]["additionalProperties"]["maxLength"] == 63
    assert "self.all(k, k.contains('/'))" in [r["rule"] for r in props["podLabels"]["x-kubernetes-validations"]]


def test_cel_regexes_are_valid_python_regexes_too() -> None:
    """The CEL raw strings are plain RE2; Python compiles the same text (a cheap syntax check)."""
    checked = 0
    for path in (SESSION_FILE, POLICY_FILE):
        for _, node in walk(schema_of(load(path))):
            for rule in node.get("x-kubernetes-validations", []):
                for regex in re.findall(r"r'([^']*)'", rule["rule"]):
                    re.compile(regex)
                    checked += 1
    assert checked > 0, "no CEL regex found: the pattern above no longer matches how crdgen writes them"


def test_volume_access_modes_default_so_agent_sandbox_can_create_the_pvc() -> None:
    # A PVC needs an access mode; without this default a session got stuck in agent-sandbox's ReconcilerError.
    vct = schema_of(load(SESSION_FILE))["properties"]["spec"]["properties"]["volumeClaimTemplates"]["items"]
    modes = vct["properties"]["spec"]["properties"]["accessModes"]
    assert modes["default"] == ["ReadWriteOnce"] and modes["minItems"] == 1
