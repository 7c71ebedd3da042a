"""`agentsession-operator --version`: the installed distribution's version, and the API's beside it."""

from __future__ import annotations

import pytest

import agentsession_api
import agentsession_operator
from agentsession_operator import cli


def test_version_prints_and_exits(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_args(["--version"])
    assert exit_info.value.code == 0
    version, api = agentsession_operator.__version__, agentsession_api.__version__
    assert capsys.readouterr().out.strip() == f"agentsession-operator {version} (agentsession-api {api})"
    assert version != "0+unknown"
