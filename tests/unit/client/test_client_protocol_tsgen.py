"""The in-pod protocol is written once (`langchain_k8s_client.protocol`): the TypeScript client's copy
(client-ts/src/generated/protocol.ts) is generated from it, and the Content-Encoding rule both follow."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from langchain_k8s_client import protocol, protocol_tsgen

REPO = Path(__file__).resolve().parents[3]
GENERATED = REPO / "client-ts" / "src" / "generated" / "protocol.ts"
CLIENT = REPO / "client" / "langchain_k8s_client"


def test_committed_protocol_is_fresh() -> None:
    diff = protocol_tsgen.drift(GENERATED)
    assert not diff, "client-ts protocol is stale, run `make crds`:\n" + "".join(diff[:80])


def test_every_constant_is_generated() -> None:
    text = protocol_tsgen.render()
    names = [name for name in vars(protocol) if name.isupper() and not name.startswith("_")]
    assert len(names) > 60
    for name in names:
        assert f"export const {name} = " in text, name
    assert 'export const READABLE_CONTENT_CODINGS = ["identity"] as const;' in text
    assert "export const GATEWAY_STATUSES = [502, 503, 504] as const;" in text


def test_stale_file_is_reported(tmp_path: Path) -> None:
    out = tmp_path / "protocol.ts"
    out.write_text("// old\n")
    assert protocol_tsgen.drift(out)
    assert protocol_tsgen.main(["--check", "--out", str(out)]) == 1
    assert protocol_tsgen.main(["--out", str(out)]) == 0
    assert protocol_tsgen.main(["--check", "--out", str(out)]) == 0


def test_no_client_module_redefines_a_protocol_constant() -> None:
    """One source: a module of the client assigns none of protocol's names (it imports them)."""
    names = {name for name in vars(protocol) if name.isupper() and not name.startswith("_")}
    found = []
    for path in sorted(CLIENT.rglob("*.py")):
        if path.name == "protocol.py":
            continue
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for target in targets:
                if isinstance(target, ast.Name) and target.id in names:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} {target.id}")
    assert found == [], "import these from langchain_k8s_client.protocol:\n" + "\n".join(found)


# The one Content-Encoding rule (client-ts/test/cross-language.test.ts runs the same table through both).
@pytest.mark.parametrize(
    ("lines", "readable"),
    [
        ([], True),
        ([""], True),
        (["identity"], True),
        (["Identity"], True),
        (["IDENTITY"], True),
        (["identity, identity"], True),
        (["identity,"], True),
        ([" , identity ,\t"], True),
        (["identity", "identity"], True),
        (["gzip"], False),
        (["GZIP"], False),
        (["identity, gzip"], False),
        (["identity", "gzip"], False),
        (["gzip, gzip"], False),
        (["x-custom"], False),
        (["identity\x0b"], False),  # not OWS: the token is not "identity"
        (["\u0130dentity"], False),  # non-ASCII never lowers to a coding
        (["identit"], False),
    ],
)
def test_content_codings_readable(lines: list[str], readable: bool) -> None:
    assert protocol.content_codings_readable(lines) is readable
