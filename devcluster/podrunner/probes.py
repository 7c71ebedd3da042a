"""Readiness probes as a kubelet runs them: httpGet, tcpSocket or exec against the pod."""

from __future__ import annotations

import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProbeSpec:
    kind: str  # http | tcp | exec | ports | none
    host: str
    port: int = 0
    path: str = "/"
    command: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    failure_threshold: int = 3


def _port(value: Any, container: dict[str, Any]) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    for port in container.get("ports") or []:
        if port.get("name") == value:
            return int(port["containerPort"])
    raise ValueError(f"probe port {value!r} matches no containerPort of container {container.get('name')!r}")


def from_container(container: dict[str, Any], pod_ip: str) -> ProbeSpec:
    """The container's readinessProbe; without one, Ready once its declared ports accept connections."""
    probe = container.get("readinessProbe")
    if not probe:
        ports = tuple(int(p["containerPort"]) for p in container.get("ports") or [] if p.get("containerPort"))
        return ProbeSpec("ports" if ports else "none", pod_ip, ports=ports, period=1.0)
    common: dict[str, Any] = {
        "host": pod_ip,
        "initial_delay": float(probe.get("initialDelaySeconds") or 0),
        "period": float(probe.get("periodSeconds") or 10),
        "timeout": float(probe.get("timeoutSeconds") or 1),
        "failure_threshold": int(probe.get("failureThreshold") or 3),
    }
    if "httpGet" in probe:
        http = probe["httpGet"]
        return ProbeSpec("http", port=_port(http.get("port"), container), path=http.get("path") or "/", **common)
    if "tcpSocket" in probe:
        return ProbeSpec("tcp", port=_port(probe["tcpSocket"].get("port"), container), **common)
    if "exec" in probe:
        return ProbeSpec("exec", command=tuple(probe["exec"].get("command") or ()), **common)
    return ProbeSpec("none", pod_ip)


def _tcp(host: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def run(spec: ProbeSpec, exec_in_pod: Callable[[list[str], float], int] | None = None) -> bool:
    """One probe attempt; True on success."""
    if spec.kind == "none":
        return True
    if spec.kind == "ports":
        return all(_tcp(spec.host, port, spec.timeout) for port in spec.ports)
    if spec.kind == "tcp":
        return _tcp(spec.host, spec.port, spec.timeout)
    if spec.kind == "http":
        try:
            with urllib.request.urlopen(f"http://{spec.host}:{spec.port}{spec.path}", timeout=spec.timeout) as r:
                return 200 <= r.status < 400
        except (OSError, urllib.error.URLError, ValueError):
            return False
    if spec.kind == "exec" and exec_in_pod is not None:
        try:
            return exec_in_pod(list(spec.command), spec.timeout) == 0
        except (OSError, subprocess.TimeoutExpired):
            return False
    return False
