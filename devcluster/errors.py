"""One base for every error the dev cluster reports to a person, and the one way entry points report it.

A missing host package, a failed build or a cluster that will not start is something to fix, not a bug:
every entry point (``python -m devcluster``, the demo, the benchmarks) prints it as one line and exits 1,
without a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn


class DevclusterError(RuntimeError):
    """Something the user can fix; its message says what."""


def report(exc: DevclusterError) -> int:
    print(f"[devcluster] error: {exc}", file=sys.stderr, flush=True)
    return 1


def run(main: Callable[[], object]) -> NoReturn:
    """Run an entry point's ``main``: a DevclusterError becomes one line on stderr and exit status 1."""
    try:
        result = main()
    except DevclusterError as exc:
        sys.exit(report(exc))
    sys.exit(result if isinstance(result, int) else 0)
