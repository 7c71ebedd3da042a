"""Issue 28 item 12: env values (often secrets) never reach a log line."""

from __future__ import annotations

import logging

import pytest

from agentsession_operator.infra import logs

SECRET = "sk-live-0123456789"


def test_env_values_are_redacted_from_structured_fields(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        logs.configure("INFO")
        manifest = {"spec": {"env": [{"name": "API_TOKEN", "value": SECRET}, {"name": "FROM", "valueFrom": {}}]}}
        logs.logger(session="s").info("claim created", manifest=manifest, patches=[manifest])
        logging.getLogger("kopf.activities").warning("plain %s", "message")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    out = capsys.readouterr().out
    assert "claim created" in out and "API_TOKEN" in out
    assert SECRET not in out
    assert "<redacted>" in out
