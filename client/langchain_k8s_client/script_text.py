"""The in-pod scripts as they are sent (the files of `scripts/`), and the command line that carries them.

The upstream python runtime shlex-splits the command and execs it without a
shell, in its base directory, with no stdin, and fails the whole request when the
output is not UTF-8. So every script is run as `sh -c <script> lkc <args>`
(`sh` instead of `lkc` for the execute wrapper, whose user command sees it as $0):
the script text is constant and all data (paths, the user command) travels as
positional arguments, never interpolated into shell text. Paths are always
absolute, so no argument can be mistaken for an option. Scripts print only ASCII
protocol lines; anything that may carry arbitrary bytes is base64-encoded in the pod.

Pure: the scripts are package data, read once at import by the modules that send them (`probe`,
`commands`, `gnu_grep`, `pyscripts`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from importlib import resources
from typing import Final


def runtime_command(argv: Sequence[str]) -> str:
    """Quote argv so the runtime's `shlex.split` gives back exactly these strings."""
    return shlex.join(argv)


def sh_command(script: str, *args: str) -> str:
    """`sh -c <script>` with positional arguments; `$0` is the fixed word `lkc`."""
    return runtime_command(["sh", "-c", script, "lkc", *args])


_SCRIPTS: Final = resources.files(__package__) / "scripts"
_INCLUDE: Final = re.compile(r"^\s*\. \./([a-z_]+\.sh)\s*$")


def load_script(name: str) -> str:
    """A script of `scripts/` as it is sent: comment lines and indentation dropped (they stay in the
    file, for readers and shellcheck), and each `. ./other.sh` line replaced by that script (loaded the same way)."""
    lines: list[str] = []
    for line in (_SCRIPTS / name).read_text(encoding="utf-8").splitlines():
        include = _INCLUDE.match(line)
        if include:
            lines.append(load_script(include.group(1)))
        elif not line.lstrip().startswith("#"):
            lines.append(line.lstrip())  # indentation is for readers: every byte is parsed twice per call
    return "\n".join(lines)


_PY_INCLUDE: Final = re.compile(r"^#: include ([a-z_]+\.py)$")


def load_pyscript(name: str) -> str:
    """A python3 program of `scripts/` as it is sent: whole-line comments dropped (indentation is
    syntax here, so it stays), and each `#: include other.py` line replaced by that file."""
    out: list[str] = []
    for line in (_SCRIPTS / name).read_text(encoding="utf-8").splitlines():
        include = _PY_INCLUDE.match(line)
        if include:
            out.append(load_pyscript(include.group(1)))
        elif not line.lstrip().startswith("#"):
            out.append(line + "\n")
    return "".join(out)
