"""kube/election/__init__.py: the election's one face (issue 50 item 4), lazy so the transport can import
election/hold.py from below the electors."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from agentsession_operator.kube import election


@pytest.mark.parametrize("name", election.__all__)
def test_each_name_of_the_face_is_its_module_s_own(name: str) -> None:
    module = importlib.import_module(f"{election.__name__}.{election._MODULE_OF[name]}")
    assert getattr(election, name) is getattr(module, name)


def test_the_face_names_what_it_exports() -> None:
    assert sorted(election.__all__) == sorted(election._MODULE_OF)
    with pytest.raises(AttributeError):
        _ = election.not_a_name


@pytest.mark.parametrize(
    "first", ["agentsession_operator.kube.client", "agentsession_operator.kube.transport", election.__name__]
)
def test_any_module_imports_first(first: str) -> None:
    """The transport imports election/hold.py, and the electors import the transport and the client: an
    eager face made that a cycle, which broke whichever of them a process imported first."""
    code = f"import {first}; from agentsession_operator.kube.election import LeaderElector, ShardElector, bind"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
