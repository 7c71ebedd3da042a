"""Every pytest run under tests/: skips must be declared (tests/skip_gate.py, tests/allowed_skips.txt)."""

from __future__ import annotations

import pytest

from tests import skip_gate

_skips: list[skip_gate.Skip] = []
_undeclared: list[skip_gate.Skip] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):  # an xfail is reported as skipped too
        _skips.append(skip_gate.Skip(report.nodeid, skip_gate.reason_of(report.longrepr)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _undeclared[:] = skip_gate.undeclared(_skips, skip_gate.load())
    if _undeclared and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _undeclared:
        terminalreporter.section("undeclared skips", sep="=", red=True, bold=True)
        for line in skip_gate.report(_undeclared):
            terminalreporter.write_line(line)
