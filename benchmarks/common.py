"""What the benchmarks share: the operator as a process, without webhook, metrics or health ports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

CLK_TCK = os.sysconf("SC_CLK_TCK")


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


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])
