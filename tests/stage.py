"""One stage of `make test`: run a command, time it, and record one line of what it counted.

    python -m tests.stage NAME -- COMMAND...   run COMMAND (its output passes through), append its line
    python -m tests.stage --summary            print every recorded line, then the totals

The lines go to $STAGES_FILE (default .cluster/stages.tsv); `make test` starts a new file and `.ci/run`
prints the summary at its end, so a failure is readable at a glance: which stage, what it counted, how long.
Counts are read from the test runner's closing line (pytest's `3 failed, 10 passed in 4.2s`, node's
`# pass 33` / `# fail 0`); a stage whose runner printed none (a build) shows its exit code and time only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

STAGES_FILE = Path(os.environ.get("STAGES_FILE", ".cluster/stages.tsv"))
KINDS = ("passed", "failed", "errors", "skipped", "xfailed", "xpassed", "deselected")
_PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")
_PYTEST_CLOSING = re.compile(r"^=*\s*(\d+ \w+|no tests ran)\b.* in [0-9.]+s\b")
_NODE_COUNT = re.compile(r"^# (pass|fail|skipped) (\d+)$")


def counts(output: str) -> dict[str, int]:
    """What the runner's closing line(s) counted; empty when there is none."""
    found: dict[str, int] = {}
    for line in output.splitlines():
        line = line.strip()
        if _PYTEST_CLOSING.match(line):
            found = {}
            for number, kind in _PYTEST_COUNT.findall(line):
                key = "errors" if kind.startswith("error") else kind
                found[key] = int(number)
        node = _NODE_COUNT.match(line)
        if node:
            key = {"pass": "passed", "fail": "failed"}.get(node[1], node[1])
            found[key] = int(node[2])
    return found


def line_of(name: str, code: int, seconds: float, counted: dict[str, int]) -> str:
    verdict = "ok" if code == 0 else f"FAILED (exit {code})"
    parts = [f"{counted[k]} {k}" for k in KINDS if counted.get(k)]
    what = ", ".join(parts) if parts else "no tests counted"
    return f"{name}\t{verdict}\t{what}\t{seconds:.0f} s"


def run(name: str, command: list[str]) -> int:
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    assert proc.stdout is not None
    seen: list[str] = []
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        seen.append(line)
    code = proc.wait()
    STAGES_FILE.parent.mkdir(parents=True, exist_ok=True)
    with STAGES_FILE.open("a") as out:
        out.write(line_of(name, code, time.monotonic() - started, counts("".join(seen))) + "\n")
    return code


def summary() -> str:
    if not STAGES_FILE.exists():
        return "no stage ran"
    rows = [line.split("\t") for line in STAGES_FILE.read_text().splitlines() if line.strip()]
    width = max(len(r[0]) for r in rows)
    lines = [f"{r[0]:<{width}}  {r[1]:<16} {r[3]:>7}  {r[2]}" for r in rows]
    total: dict[str, int] = {}
    for row in rows:
        for number, kind in _PYTEST_COUNT.findall(row[2]):
            total[kind] = total.get(kind, 0) + int(number)
    seconds = sum(float(r[3].split()[0]) for r in rows)
    lines.append(f"{'all stages':<{width}}  {'':<16} {seconds:>5.0f} s")
    # The plain closing line a CI reads: passed and failed (errors count as failed), then skipped.
    failed = total.get("failed", 0) + total.get("errors", 0)
    lines.append(f"total: {total.get('passed', 0)} passed, {failed} failed, {total.get('skipped', 0)} skipped")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv == ["--summary"]:
        print(summary())
        return 0
    if argv == ["--reset"]:
        STAGES_FILE.unlink(missing_ok=True)
        return 0
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m tests.stage NAME -- COMMAND... | --summary | --reset", file=sys.stderr)
        return 2
    return run(argv[0], argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
