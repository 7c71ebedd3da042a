"""tests/opskit/netguard refuses and logs what would leave the machine, and lets loopback through (the
langgraph dev e2e test relies on it to show no traffic leaves)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

NETGUARD = Path(__file__).resolve().parents[2] / "opskit" / "netguard"
PROBE = """
import socket
for target in (("192.0.2.1", 443), ("pypi.org", 443), ("::1", 1), ("127.0.0.1", 1)):
    try:
        socket.create_connection(target, timeout=2).close()
        print(target[0], "connected")
    except OSError as exc:
        print(target[0], "netguard" if "netguard" in str(exc) else "passed the guard")
"""


def test_off_machine_is_refused_and_logged_loopback_passes(tmp_path: Path) -> None:
    log = tmp_path / "net.log"
    env = dict(os.environ, NETGUARD_LOG=str(log), PYTHONPATH=str(NETGUARD))
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "192.0.2.1 netguard",
        "pypi.org netguard",
        "::1 passed the guard",
        "127.0.0.1 passed the guard",
    ]
    assert [line.split(" ", 1)[1] for line in log.read_text().splitlines()] == [
        "getaddrinfo '192.0.2.1'",
        "getaddrinfo 'pypi.org'",
    ]
    assert Path(f"{log}.loaded").read_text().strip()


def test_the_allowed_ranges_pass(tmp_path: Path) -> None:
    """NETGUARD_ALLOW: the real node's pod and Service ranges (routed only into its network namespace).
    Judged without connecting: nothing is sent anywhere."""
    env = dict(os.environ, PYTHONPATH=str(NETGUARD), NETGUARD_ALLOW="198.18.0.0/19, 198.19.0.0/20")
    probe = (
        "import sitecustomize as g; print([g._local(h) for h in ('198.18.0.7', '198.19.0.1', '198.18.32.1', 'a.b')])"
    )
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[True, True, False, False]"
