"""The TypeScript contract (client-ts/src/generated/contract.ts) matches the Python source it is made from."""

from __future__ import annotations

from pathlib import Path

from agentsession_api import names, phases, tsgen

REPO = Path(__file__).resolve().parents[3]
CONTRACT = REPO / "client-ts" / "src" / "generated" / "contract.ts"


def test_committed_contract_is_fresh() -> None:
    diff = tsgen.drift(CONTRACT)
    assert not diff, "client-ts contract is stale, run `make crds`:\n" + "".join(diff[:80])


def test_contract_carries_every_constant_and_kind() -> None:
    text = tsgen.render()
    assert f'export const ANNOTATION_ACTIVITY = "{names.ANNOTATION_ACTIVITY}";' in text
    assert f'export const SESSION_PLURAL = "{names.SESSION_PLURAL}";' in text
    for phase in phases.Phase:
        assert f'{phase.name}: "{phase.value}"' in text
    for kind in ("AgentSession", "AgentSessionSpec", "AgentSessionStatus", "AgentSessionPolicy", "Condition"):
        assert f"export interface {kind} {{" in text


def test_stale_file_is_reported(tmp_path: Path) -> None:
    out = tmp_path / "contract.ts"
    out.write_text("// old\n")
    assert tsgen.drift(out)
    assert tsgen.main(["--check", "--out", str(out)]) == 1
    assert tsgen.main(["--out", str(out)]) == 0
    assert tsgen.main(["--check", "--out", str(out)]) == 0
