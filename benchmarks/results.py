"""Provenance of every benchmark table (issue 53 item 1): one machine-readable file per table.

    record = Record.start("bench_client", rounds=7)      # before the first round: the load, the commit
    record.sample("execute", "ours", 12.3)               # every sample, in milliseconds or seconds
    record.finish(medians={...}, ratios={...}, unit="ms")  # writes benchmarks/results/bench_client.json

The file names the commit measured (and whether it is on main: a figure counts only when it is, so a
dirty tree or a commit off main is written but says so), the date, the machine (cores, load before and
after), the rounds, every sample, the medians and the ratios. `make bench` writes the files and commits
nothing; docs/performance.md's tables that name a file are checked against it
(tests/unit/cluster_tools/test_bench_results.py).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).with_name("results")
ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def provenance() -> dict[str, Any]:
    """The commit measured: its hash, whether the tree had changes, whether main contains it."""
    commit = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    on_main = (
        bool(commit)
        and subprocess.run(
            ["git", "merge-base", "--is-ancestor", commit, "main"], cwd=ROOT, capture_output=True, check=False
        ).returncode
        == 0
    )
    return {"commit": commit, "dirty": dirty, "on_main": on_main and not dirty}


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


@dataclass
class Record:
    name: str
    rounds: int
    started: str
    load_before: float
    source: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    @classmethod
    def start(cls, name: str, rounds: int, **params: Any) -> Record:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return cls(name, rounds, now, _load(), provenance(), dict(params))

    def sample(self, row: str, column: str, value: float) -> None:
        self.samples.setdefault(row, {}).setdefault(column, []).append(value)

    def medians(self) -> dict[str, dict[str, float]]:
        return {row: {col: statistics.median(v) for col, v in cols.items()} for row, cols in self.samples.items()}

    def finish(
        self,
        unit: str,
        medians: dict[str, dict[str, float]] | None = None,
        ratios: dict[str, float] | None = None,
        directory: Path = RESULTS,
    ) -> Path:
        """Write the file (every sample, medians, ratios) and say where; returns its path."""
        body = {
            "benchmark": self.name,
            **self.source,
            "started": self.started,
            "finished": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": {"cores": os.cpu_count(), "load_before": self.load_before, "load_after": _load()},
            "rounds": self.rounds,
            "params": self.params,
            "unit": unit,
            "samples": self.samples,
            "medians": medians if medians is not None else self.medians(),
            "ratios": ratios or {},
        }
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.name}.json"
        path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
        where = "on main" if body["on_main"] else "NOT on main (or a dirty tree): not a result to publish"
        print(f"results: {path} (commit {str(body['commit'])[:10]}, {where})", flush=True)
        return path


def load(name: str, directory: Path = RESULTS) -> dict[str, Any]:
    return dict(json.loads((directory / f"{name}.json").read_text()))


def markdown(body: dict[str, Any]) -> str:
    """The table docs/performance.md shows of a results file (between `<!-- results: NAME -->` and
    `<!-- /results -->`): medians per row and column, then the ratios, then where they come from."""
    unit = body["unit"]
    lines = [f"| {body['benchmark']} ({unit}, medians) | " + " | ".join(_columns(body)) + " |"]
    lines.append("|---" * (1 + len(_columns(body))) + "|")
    for row, cols in body["medians"].items():
        cells = [f"{cols[c]:.2f}" if c in cols else "" for c in _columns(body)]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"- {name}: **{value:.2f}**" for name, value in body["ratios"].items()]
    machine = body["machine"]
    lines.append(
        f"- measured at {str(body['commit'])[:10]} ({'on main' if body['on_main'] else 'NOT on main'}), "
        f"{body['finished']}, {body['rounds']} rounds, {machine['cores']} cores, load "
        f"{machine['load_before']:.1f} -> {machine['load_after']:.1f}; every sample: "
        f"`benchmarks/results/{body['benchmark']}.json`"
    )
    return "\n".join(lines)


def _columns(body: dict[str, Any]) -> list[str]:
    seen: dict[str, None] = {}
    for cols in body["medians"].values():
        seen.update(dict.fromkeys(cols))
    return list(seen)


MARKER = "<!-- results: "
END = "<!-- /results -->"


def stale_blocks(document: str, directory: Path = RESULTS) -> list[str]:
    """The marked blocks of `document` that differ from their results file (a test fails on any)."""
    stale = []
    rest = document
    while MARKER in rest:
        _, rest = rest.split(MARKER, 1)
        name, rest = rest.split(" -->", 1)
        block, rest = rest.split(END, 1)
        if block.strip() != markdown(load(name.strip(), directory)).strip():
            stale.append(name.strip())
    return stale


if __name__ == "__main__":  # print a results file's block for docs/performance.md
    import sys

    for name in sys.argv[1:]:
        print(f"{MARKER}{name} -->\n{markdown(load(name))}\n{END}")
