"""client-ts/scripts is the Python client's scripts/, byte for byte: the TypeScript package builds, tests and
packs from its own folder with its committed copy (issue 52 item 3), and both clients send the same bytes."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).parents[3]
SOURCE = ROOT / "client" / "langchain_k8s_client" / "scripts"
COPY = ROOT / "client-ts" / "scripts"


def _scripts(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.suffix in (".sh", ".py")}


def test_the_typescript_packages_scripts_are_the_python_clients() -> None:
    assert _scripts(SOURCE), SOURCE
    refresh = "run `node client-ts/tools/copy-scripts.mjs` and commit client-ts/scripts"
    assert _scripts(COPY) == _scripts(SOURCE), refresh
