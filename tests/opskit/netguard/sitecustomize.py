"""Loaded by a child Python whose PYTHONPATH starts here: every connection or name lookup that would leave
the machine is refused and written to $NETGUARD_LOG (tests/e2e/test_langgraph_dev.py reads it).

Loopback addresses (127.0.0.0/8, ::1, localhost) and Unix sockets pass: the local cluster, its pods on
127.x addresses, and the server under test live there. So do the ranges in $NETGUARD_ALLOW (comma-separated
CIDRs): the real node's pod and Service ranges, routed only into the network namespace devcluster creates.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from typing import Any

_LOG = os.environ.get("NETGUARD_LOG", "")
_ALLOW = [ipaddress.ip_network(c.strip()) for c in os.environ.get("NETGUARD_ALLOW", "").split(",") if c.strip()]


def _local(host: Any) -> bool:
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if host in (None, "", "localhost"):
        return True
    try:
        address = ipaddress.ip_address(str(host).split("%")[0])
    except ValueError:
        return False
    return address.is_loopback or any(address in net for net in _ALLOW)


def _refuse(what: str) -> None:
    if _LOG:
        with open(_LOG, "a") as log:
            log.write(f"{os.getpid()} {what}\n")
    raise OSError(f"netguard: {what} would leave the machine")


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.connect":
        address = args[1]
        if isinstance(address, tuple) and not _local(address[0]):
            _refuse(f"connect {address[0]}:{address[1]}")
    elif event == "socket.getaddrinfo" and not _local(args[0]):
        _refuse(f"getaddrinfo {args[0]!r}")


sys.addaudithook(_hook)
if _LOG:  # proof for the test that the guard is in force in this process
    with open(_LOG + ".loaded", "a") as marker:
        marker.write(f"{os.getpid()}\n")
