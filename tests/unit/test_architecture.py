"""The layers of docs/architecture.md, enforced: a module may import only from its own layer or lower ones.

Reads the imports of every module with ``ast`` (nothing is imported), so a violation names the file,
the line and the rule it breaks.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "agentsession_api": ROOT / "api" / "agentsession_api",
    "langchain_k8s_client": ROOT / "client" / "langchain_k8s_client",
    "agentsession_operator": ROOT / "operator" / "agentsession_operator",
    "agentsession_nodeagent": ROOT / "nodeagent" / "agentsession_nodeagent",
    "devcluster": ROOT / "devcluster",
    "testkit": ROOT / "testkit",
}

# Each layer, lowest first, with what it may import from the project (its own layer is always allowed).
LAYERS: dict[str, tuple[str, ...]] = {
    # The contract: nothing of the project.
    "agentsession_api": (),
    # The client: the pure core (no I/O) under the two I/O drivers under the backends.
    "langchain_k8s_client.core": ("agentsession_api",),
    "langchain_k8s_client.io": ("agentsession_api", "langchain_k8s_client.core"),
    "langchain_k8s_client.backends": ("agentsession_api", "langchain_k8s_client.core", "langchain_k8s_client.io"),
    # The operator: names, then decisions and infra side by side, the I/O shell, the settings, the handlers, the CLI.
    "agentsession_operator.constants": ("agentsession_api",),
    "agentsession_operator.decisions": ("agentsession_api", "agentsession_operator.constants"),
    "agentsession_operator.infra": ("agentsession_api", "agentsession_operator.constants"),
    # The node agent (its own distribution, a privileged DaemonSet): the contract alone; what it shares with
    # the operator is agentsession_api.node_agent, never the operator's code.
    "agentsession_nodeagent": ("agentsession_api",),
    "agentsession_operator.kube": (
        "agentsession_api",
        "agentsession_operator.constants",
        "agentsession_operator.decisions",
        "agentsession_operator.infra",
    ),
    # Admission, a feature room beside the reconciler: its rules (pure, checked below like decisions), the
    # kopf handler, the server and its shared certificate; it reads the API through kube.client.
    "agentsession_operator.admission": (
        "agentsession_api",
        "agentsession_operator.constants",
        "agentsession_operator.decisions",
        "agentsession_operator.infra",
        "agentsession_operator.kube",
    ),
    # The router credential issuer, a feature room beside the reconciler: it reads the API (kube.client) and
    # serves HTTPS with the webhook's certificate (admission); the handlers start it.
    "agentsession_operator.issuer": (
        "agentsession_api",
        "agentsession_operator.constants",
        "agentsession_operator.decisions",
        "agentsession_operator.infra",
        "agentsession_operator.kube",
        "agentsession_operator.admission",
    ),
    # Every flag in one frozen object (settings.py): it builds the webhook's, the issuer's, the network's and
    # the election's configurations; the handlers hold it (handlers/state.py), the CLI parses it.
    "agentsession_operator.settings": (
        "agentsession_api",
        "agentsession_operator.constants",
        "agentsession_operator.decisions",
        "agentsession_operator.infra",
        "agentsession_operator.kube",
        "agentsession_operator.admission",
        "agentsession_operator.issuer",
    ),
    "agentsession_operator.handlers": (
        "agentsession_api",
        "agentsession_operator.constants",
        "agentsession_operator.decisions",
        "agentsession_operator.infra",
        "agentsession_operator.kube",
        "agentsession_operator.admission",
        "agentsession_operator.issuer",
        "agentsession_operator.settings",
    ),
    "agentsession_operator.cli": (
        "agentsession_api",
        "agentsession_operator.constants",
        "agentsession_operator.decisions",
        "agentsession_operator.infra",
        "agentsession_operator.kube",
        "agentsession_operator.admission",
        "agentsession_operator.issuer",
        "agentsession_operator.settings",
        "agentsession_operator.handlers",
    ),
    # The dev cluster is a tool beside the products: it imports none of them.
    "devcluster": (),
    # What tests/ and benchmarks/ both use: the products and the dev cluster (never tests/ or benchmarks/,
    # test_benchmarks_and_testkit_import_nothing_from_tests); none of them imports it.
    "testkit": (
        "agentsession_api",
        "langchain_k8s_client.core",
        "langchain_k8s_client.io",
        "langchain_k8s_client.backends",
        "agentsession_operator.issuer",  # sandbox_router: a signing key and the router's key set
        "devcluster",
    ),
}

CLIENT_CORE = {
    "errors",
    "wire",
    "protocol",
    "paths",
    "script_text",
    "probe",
    "commands",
    "gnu_grep",
    "pyscripts",
    "runtime",
    "activity",
    "durations",
    "flows",
    "pod_identity",
}
CLIENT_IO = {
    "transport",
    "http11",
    "http11_protocol",
    "http11_io",
    "http11_async",
    "http11_sync",
    "http11_unasync",
    "limits",
    "sessions",
    "cluster_keys",
    "router_credentials",
}
NO_IO = ("asyncio", "socket", "httpx", "kopf", "kubernetes", "kubernetes_asyncio", "structlog", "prometheus_client")
"""Modules the pure layers (the client's core, the operator's decisions, the contract) never import."""


def layer_of(module: str) -> str:
    """The layer a dotted module name belongs to."""
    top, _, rest = module.partition(".")
    first = rest.split(".")[0] if rest else ""
    if top == "langchain_k8s_client":
        if first in CLIENT_CORE or first.startswith("scripts"):
            return "langchain_k8s_client.core"
        return "langchain_k8s_client.io" if first in CLIENT_IO else "langchain_k8s_client.backends"
    if top == "agentsession_operator":
        if first in ("", "__main__", "cli"):  # the command line
            return "agentsession_operator.cli"
        return f"agentsession_operator.{first}"
    return top


def modules() -> Iterator[tuple[str, Path]]:
    for package, directory in PACKAGES.items():
        for path in sorted(directory.rglob("*.py")):
            parts = path.relative_to(directory).with_suffix("").parts
            name = ".".join((package, *parts)).removesuffix(".__init__")
            yield name, path


def imports(module: str, path: Path) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import, relative ones resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # `from pkg import module`
                yield node.lineno, f"{target}.{alias.name}"


def _project_module(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


ALL = list(modules())


@pytest.mark.parametrize(("module", "path"), ALL, ids=[m for m, _ in ALL])
def test_imports_go_down_the_layers(module: str, path: Path) -> None:
    own = layer_of(module)
    allowed = {own, *LAYERS[own]}
    known = dict(ALL)
    wrong = []
    for line, target in imports(module, path):
        if not _project_module(target) or target == module.split(".")[0]:
            continue  # third party, or the own package's top level
        if target not in known and target.rpartition(".")[0] in known:
            continue  # `from module import name`: the module itself is checked
        if layer_of(target) not in allowed:
            wrong.append(f"{path.relative_to(ROOT)}:{line} ({own}) imports {target} ({layer_of(target)})")
    assert not wrong, "a lower layer imports a higher one (docs/architecture.md):\n" + "\n".join(wrong)


PURE = [
    (m, p)
    for m, p in ALL
    if layer_of(m) in ("agentsession_api", "langchain_k8s_client.core", "agentsession_operator.decisions")
    or m == "agentsession_operator.admission.rules"
]


@pytest.mark.parametrize(("module", "path"), PURE, ids=[m for m, _ in PURE])
def test_pure_layers_do_no_io(module: str, path: Path) -> None:
    found = [f"line {line}: {target}" for line, target in imports(module, path) if target.split(".")[0] in NO_IO]
    assert not found, f"{module} is in a pure layer but imports " + ", ".join(found)


def test_every_layer_is_known() -> None:
    assert {layer_of(m) for m, _ in ALL} <= set(LAYERS)


def _scripts(top: str) -> list[tuple[str, Path]]:
    return [
        (".".join((top, *path.relative_to(ROOT / top).with_suffix("").parts)).removesuffix(".__init__"), path)
        for path in sorted((ROOT / top).rglob("*.py"))
    ]


BENCHMARKS_AND_TESTKIT = _scripts("benchmarks") + _scripts("testkit")


@pytest.mark.parametrize(("module", "path"), BENCHMARKS_AND_TESTKIT, ids=[m for m, _ in BENCHMARKS_AND_TESTKIT])
def test_benchmarks_and_testkit_import_nothing_from_tests(module: str, path: Path) -> None:
    """The benchmarks import nothing from tests/ (issue 50 item 6): what both need is in testkit/, which
    imports neither tests/ nor benchmarks/."""
    banned = ("tests", "benchmarks") if module.startswith("testkit") else ("tests",)
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for line, target in imports(module, path)
        if target.split(".")[0] in banned
    ]
    assert not found, "move what both need to testkit/ (docs/architecture.md):\n" + "\n".join(found)


def test_benchmarks_are_found() -> None:
    assert len([m for m, _ in BENCHMARKS_AND_TESTKIT if m.startswith("benchmarks.bench_")]) > 10
    assert "testkit.manifests" in dict(BENCHMARKS_AND_TESTKIT)


# The rooms of the operator's I/O shell, lowest first: a room imports only rooms of a lower floor, so
# each can be read and tested with what lies below it (a new module of kube/ takes its place here). A
# package of kube/ (election/) gives each of its modules a floor ("election.lease"), and its face
# (__init__.py, "election") one above every module it exports.
KUBE_FLOORS: dict[str, int] = {
    "election.hold": -1,  # below the transport, which binds every write to the hold
    "api": -1,  # the HTTP client and its credentials: below the transport, which wraps its requests
    "clock": 0,
    "background": 0,
    "fairness": 0,
    "session_records": 0,
    "transport": 0,
    "election.lease": 0,
    "places": 0,
    "takeover": 0,
    "primed_watch": 0,
    "election.sharding": 0,
    "projection": 0,
    "agent_certificates": 0,
    "missing_pools": 0,
    "cache": 1,
    "election.layout_guard": 1,
    "client": 1,
    "node_agent": 1,
    "scheduler": 2,
    "owners": 2,
    "status_writer": 2,
    "election.leader": 2,
    "preflight": 2,
    "hibernation": 2,
    "acting": 3,
    "forks": 3,
    "orphans": 3,
    "policy_status": 3,
    "resync": 3,
    "election.shard_elector": 3,
    "election": 4,  # the face: what handlers, the CLI and the reconciler import
    "session_pass": 4,
    "reconciler": 5,
    "watch_events": 6,
}
KUBE = [(m, p) for m, p in ALL if m.startswith("agentsession_operator.kube.")]


def _room(module: str) -> str:
    """The room of a module (or of a name in it): its longest dotted prefix in KUBE_FLOORS, else its first part."""
    parts = module.removeprefix("agentsession_operator.kube.").split(".")
    prefixes = (".".join(parts[:n]) for n in range(len(parts), 0, -1))
    return next((prefix for prefix in prefixes if prefix in KUBE_FLOORS), parts[0])


@pytest.mark.parametrize(("module", "path"), KUBE, ids=[m for m, _ in KUBE])
def test_kube_rooms_import_only_lower_floors(module: str, path: Path) -> None:
    room = module.removeprefix("agentsession_operator.kube.")  # a module of election/ too has a floor of its own
    assert room in KUBE_FLOORS, f"{path.relative_to(ROOT)}: a new room of kube/; give it its floor in KUBE_FLOORS"
    wrong = []
    for line, target in imports(module, path):
        if not target.startswith("agentsession_operator.kube.") or _room(target) not in KUBE_FLOORS:
            continue
        if _room(target) != room and KUBE_FLOORS[_room(target)] >= KUBE_FLOORS[room]:
            wrong.append(f"{path.relative_to(ROOT)}:{line} ({room}, floor {KUBE_FLOORS[room]}) imports {target}")
    assert not wrong, "a room of kube/ imports one on its own floor or above:\n" + "\n".join(wrong)


def test_every_kube_room_exists() -> None:
    assert {_room(m) for m, _ in KUBE} == set(KUBE_FLOORS)


def test_every_module_is_named_in_docs_architecture() -> None:
    """docs/architecture.md says where each kind of change goes: a module it does not name is one a
    newcomer cannot place (issue 50 item 6). Name it there (its room and its one job) when adding one."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    missing = []
    for package in ("api/agentsession_api", "client/langchain_k8s_client", "operator/agentsession_operator", "testkit"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "scripts" in path.parts or path.name in ("__init__.py", "__main__.py"):
                continue
            if not re.search(rf"\b{re.escape(path.stem)}\b", doc):
                missing.append(str(path.relative_to(ROOT)))
    assert missing == [], f"modules docs/architecture.md does not name: {missing}"


def test_kopfs_internals_are_touched_in_one_module() -> None:
    """kopf's private modules (``kopf._...``) only in kube/primed_watch.py, whose unit test checks the one
    behaviour it relies on against the installed kopf (issue 50 item 4): anywhere else is a hidden pin."""
    touching = sorted(
        module for module, path in ALL if any(target.startswith("kopf._") for _, target in imports(module, path))
    )
    assert touching == ["agentsession_operator.kube.primed_watch"], touching
