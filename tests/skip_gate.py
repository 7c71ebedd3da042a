"""A skip is a test that did not run: the run fails on any skip whose reason tests/allowed_skips.txt does
not declare, so a missing tool or a broken fixture cannot turn green by skipping (tests/conftest.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ALLOWED_FILE = Path(__file__).with_name("allowed_skips.txt")


@dataclass(frozen=True)
class Skip:
    nodeid: str
    reason: str


def load(path: Path = ALLOWED_FILE) -> list[re.Pattern[str]]:
    """One regular expression per line (searched in the skip's reason); blank lines and # comments ignored.
    A line that is not a valid expression is an error naming the file and line."""
    patterns = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            patterns.append(re.compile(text))
        except re.error as exc:
            raise ValueError(f"{path}:{number}: not a regular expression ({exc}): {text}") from None
    return patterns


def reason_of(longrepr: object) -> str:
    """The reason pytest records for a skip: (path, line, "Skipped: reason") for skip marks and calls."""
    text = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def undeclared(skips: list[Skip], patterns: list[re.Pattern[str]]) -> list[Skip]:
    return [s for s in skips if not any(p.search(s.reason) for p in patterns)]


def report(bad: list[Skip], path: Path = ALLOWED_FILE) -> list[str]:
    """What the terminal shows: each undeclared skip, and the line that would declare it."""
    lines = [f"{len(bad)} skip(s) not declared in {path.name}: the run fails (a skipped test proves nothing)"]
    lines += [f"  {s.nodeid}: {s.reason}" for s in bad]
    lines.append(f"Fix the cause, or if the skip is legitimate here, add a pattern of its reason to {path}, e.g.")
    lines += sorted({f"  ^{re.escape(s.reason)}$" for s in bad})
    return lines
