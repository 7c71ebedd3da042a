"""Loopback ports for the processes the project starts (API server, etcd, registry, operators under test).

A port taken with `bind(0)` and closed comes from the kernel's ephemeral range, the same range every
outgoing connection's source port comes from: under the connection churn of a test run, a client's
connection could take it in the moment before the process meant to listen on it did (EADDRINUSE, an
operator that "exited at start"). These ports come from below that range, where only an explicit bind can
take one, and never twice from one process.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_LOWEST = 20000
_given: set[int] = set()


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port nobody listens on, outside the ephemeral range (falls back to one inside it)."""
    high = _ephemeral_start() - 1
    for _ in range(200):
        port = random.randint(_LOWEST, high) if high > _LOWEST else 0
        if port in _given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = int(s.getsockname()[1])
        _given.add(port)
        return port
    raise OSError("no free loopback port below the ephemeral range")
