"""Issue 28 item 12: an operator serving its webhook without client authentication says so, loudly, at start."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from structlog.testing import capture_logs

from agentsession_operator import cli


def _start(monkeypatch: pytest.MonkeyPatch, *extra: str, webhook: bool = True) -> list[dict[str, Any]]:
    async def nothing(*_: Any, **__: Any) -> None:
        return None

    monkeypatch.setattr(cli, "_preflight", nothing)
    monkeypatch.setattr(cli.kopf, "operator", nothing)
    monkeypatch.setattr(cli.admission, "register", lambda registry: None)
    monkeypatch.setattr(cli.logs, "configure", lambda *a, **k: None)
    port = 0
    if webhook:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    args = ["--bind", "127.0.0.1", "--metrics-port", "0", "--health-port", "0", "--webhook-port", str(port), *extra]
    with capture_logs() as logs:
        cli.main(args)
    return logs


def test_a_webhook_without_client_authentication_is_a_warning_naming_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    warnings = [e for e in _start(monkeypatch) if e["log_level"] == "warning"]
    assert len(warnings) == 1, warnings
    assert "client authentication is OFF" in warnings[0]["event"] and "--webhook-client-ca" in warnings[0]["fix"]


def test_a_webhook_that_requires_the_api_servers_certificate_is_quiet(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("not read at start")
    logs = _start(monkeypatch, f"--webhook-client-ca={ca}")
    assert not [e for e in logs if e["log_level"] == "warning"]


def test_no_webhook_no_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not [e for e in _start(monkeypatch, webhook=False) if e["log_level"] == "warning"]
