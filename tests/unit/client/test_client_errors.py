"""The typed exceptions carry what the session layer and callers need."""

from __future__ import annotations

import pytest

from langchain_k8s_client import errors


@pytest.mark.parametrize(
    "cls",
    [
        errors.SessionFailed,
        errors.SessionExpired,
        errors.SessionNotReady,
        errors.SessionNotFound,
        errors.PolicyViolation,
        errors.SessionConflict,
    ],
)
def test_session_errors_carry_reason_and_message(cls: type[errors.SandboxError]) -> None:
    error = cls("PodFailed", "container exited 1")
    assert isinstance(error, errors.SandboxError)
    assert (error.reason, error.message) == ("PodFailed", "container exited 1")  # type: ignore[attr-defined]
    assert str(error) == "PodFailed: container exited 1"
    assert str(cls("Expired")) == "Expired"


def test_pod_side_errors() -> None:
    transport = errors.TransportError("connection refused", maybe_delivered=False)
    assert isinstance(transport, errors.SandboxError) and transport.maybe_delivered is False
    assert errors.TransportError("reset").maybe_delivered is True
    wrong = errors.WrongPod("pod-a", "pod-b")
    assert (wrong.expected, wrong.actual) == ("pod-a", "pod-b")
    assert "pod-b" in str(wrong) and isinstance(wrong, errors.SandboxError)
