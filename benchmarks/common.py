"""What the benchmarks share: the operator as a process, without webhook, metrics or health ports."""

from __future__ import annotations

import subprocess
import sys
from typing import IO, Any


def start_operator(
    *extra: str, stdout: IO[Any] | int = subprocess.DEVNULL, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`python -m agentsession_operator` with no listeners, so it never collides with another one."""
    command = [
        sys.executable,
        "-m",
        "agentsession_operator",
        "--metrics-port",
        "0",
        "--health-port",
        "0",
        "--webhook-port",
        "0",
        *extra,
    ]
    return subprocess.Popen(command, stdout=stdout, stderr=subprocess.STDOUT, env=env)


def stop_operator(operator: subprocess.Popen[bytes]) -> None:
    operator.terminate()
    try:
        operator.wait(timeout=30)
    except subprocess.TimeoutExpired:
        operator.kill()
        operator.wait()
