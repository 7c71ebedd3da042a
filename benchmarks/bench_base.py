"""Issue 54 item 2: the operator's base, what a replica holds in an empty cluster once started.

Each side's operator runs from an environment holding exactly what its image installs (`pip install
./api ./operator` of that checkout: `operator/Dockerfile`), built once per checkout under .cluster/: the
dev venv also holds the client's `kubernetes` and the dev tools' `rich`, which kopf and structlog import
whenever they are installed, so a replica started from it measures more than the product ships. A third
row, `dev-venv`, is this checkout's operator from the dev venv (what the other benchmarks start), for
comparison.

Per round and side: a fresh operator, cluster-wide, on a cluster with no AgentSession (checked first);
measured once it logged its start and then settled (benchmarks.bench_restart's `settle`): its RSS then,
its peak (VmHWM), the seconds to settle and its CPU until then, and the modules it imported. Rounds
interleave the sides, the order reversed every round.
Run: `.venv/bin/python -m benchmarks.bench_base [--rounds 5] [--before DIR]` (DIR: another checkout, e.g.
`git archive <commit> api operator | tar -x -C DIR`).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

from benchmarks.bench_restart import settle
from benchmarks.common import load_average, stop_on_sigterm, stop_operator
from benchmarks.results import ROOT, Record
from devcluster import errors
from devcluster.cluster import Cluster, Paths

ENVS = ROOT / ".cluster" / "bench-base-envs"


def image_env(checkout: Path) -> Path:
    """A venv with `checkout`'s api and operator distributions and their dependencies, as its image installs
    them; keyed by the two pyproject files and the sources, built once. Its python."""
    digest = hashlib.sha256()
    for project in ("api", "operator"):
        for path in sorted((checkout / project).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and ".egg-info" not in str(path):
                digest.update(str(path.relative_to(checkout)).encode() + path.read_bytes())
    where = ENVS / digest.hexdigest()[:16]
    python = where / "bin" / "python"
    if not (where / ".installed").exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(where)
        # Non-editable copies: the checkout may be a temporary directory.
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, str(checkout / "api"), str(checkout / "operator")], check=True)
        (where / ".installed").touch()
    return python


def start(python: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """A cluster-wide operator with no listeners (benchmarks.common.start_operator's flags), from `python`;
    the log's offset at its start."""
    out = open(log, "ab")  # noqa: SIM115 - the operator's lifetime
    env = {**os.environ, "MAX_SESSIONS_PER_NAMESPACE": "0"}
    env.pop("PYTHONPATH", None)
    command = [str(python), "-m", "agentsession_operator", "--log-level", "INFO"]
    command += ["--metrics-port", "0", "--health-port", "0", "--webhook-port", "0"]
    return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd="/"), out.tell()


def modules_of(python: Path) -> int:
    code = "import sys, agentsession_operator.cli; print(len(sys.modules))"
    return int(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, cwd="/").stdout)


def main() -> None:
    stop_on_sigterm()
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", default="", help="another checkout (its api/ and operator/)")
    args = parser.parse_args()
    os.environ["KUBECONFIG"] = str(Paths().kubeconfig)
    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up()
    sides: list[tuple[str, Path]] = [("this", image_env(ROOT)), ("dev-venv", Path(sys.executable))]
    if args.before:
        sides.insert(0, ("before", image_env(Path(args.before).resolve())))
    record = Record.start("bench_base", rounds=args.rounds, before=bool(args.before))
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
        listed = cluster.kubectl("get", "agentsessions", "-A", "-o", "name").stdout.strip()
        if listed:
            raise SystemExit(f"bench_base: the cluster holds sessions ({len(listed.splitlines())}): use a fresh one")
        modules = {label: modules_of(python) for label, python in sides}
        for round_ in range(args.rounds):
            for label, python in sides if round_ % 2 == 0 else sides[::-1]:
                log = cluster.paths.logs / f"operator-base-{label}.log"
                began = time.monotonic()
                operator, offset = start(python, log)
                try:
                    measured = settle(operator, began, log, offset)
                finally:
                    stop_operator(operator)
                for key in ("settled_mib", "peak_mib", "settled_s", "cpu_s"):
                    record.sample(label, key, float(measured[key]))
                record.sample(label, "modules", float(modules[label]))
                print(
                    f"{time.strftime('%H:%M:%S')} {label}: settled {measured['settled_mib']:.1f} MiB"
                    f" (peak {measured['peak_mib']:.1f}) after {measured['settled_s']:.1f} s,"
                    f" CPU {measured['cpu_s']:.2f} s, load {load_average():.1f}",
                    flush=True,
                )
    finally:
        if started_cluster:
            cluster.down()
    medians = record.medians()
    print(f"\nThe operator's base in an empty cluster (medians of {args.rounds} rounds)")
    print(f"{'operator':>9} {'settled MiB':>11} {'peak MiB':>8} {'settled s':>9} {'CPU s':>6} {'modules':>7}")
    for label, _ in sides:
        m = medians[label]
        print(
            f"{label:>9} {m['settled_mib']:>11.1f} {m['peak_mib']:>8.1f} {m['settled_s']:>9.1f}"
            f" {m['cpu_s']:>6.2f} {m['modules']:>7.0f}"
        )
    ratios = {}
    if "before" in medians:
        ratios["settled MiB, this / before"] = medians["this"]["settled_mib"] / medians["before"]["settled_mib"]
        print(f"  settled RSS this / before: {ratios['settled MiB, this / before']:.2f}")
    record.finish("MiB, s, modules", medians, ratios)


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
