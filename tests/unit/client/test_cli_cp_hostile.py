"""Issue 28 item 1: `kubectl agentsession cp NAME:/dir ./out` against a hostile sandbox's listing.

The fake sandbox lists what a real `find` prints for a directory named `a<newline>..` holding `.bashrc`,
in whichever form it is asked for (newline- or NUL-separated), and serves every download the attacker's
bytes: the pod is hostile, so both its listing and its files are."""

from __future__ import annotations

import argparse
import importlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# The module, not the `main` function the package exports under the same name.
main = importlib.import_module("langchain_k8s_client.cli.main")
HOSTILE = ["./a\n../.bashrc", "./ok.txt", "./b\x1b[2Jc", "/etc/abs", "./sub/../../up"]


@dataclass
class Result:
    output: str
    exit_code: int = 0


@dataclass
class Download:
    path: str
    content: bytes | None = b"owned"
    error: str | None = None


class HostileSandbox:
    def execute(self, command: str, timeout: int | None = None) -> Result:
        return Result("\0".join(HOSTILE) + "\0" if "-print0" in command else "\n".join(HOSTILE) + "\n")

    def download_files(self, paths: list[str]) -> list[Download]:
        return [Download(p) for p in paths]


@contextmanager
def hostile(*args: Any, **kwargs: Any) -> Any:
    yield HostileSandbox()


def test_cp_never_writes_outside_its_destination(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(main, "_backend", hostile)
    home = tmp_path / "home"
    (home / "out").mkdir(parents=True)
    (home / "out" / "link").symlink_to(home)  # a link already in the destination must not lead out either
    HOSTILE.append("./link/.profile")
    try:
        args = argparse.Namespace(source="demo:/tmp/dir", destination=str(home / "out"), request_timeout=5.0)
        with pytest.raises(main.CliError) as refused:
            main.cmd_cp(args, store=None, ns="t")  # type: ignore[arg-type]
    finally:
        HOSTILE.pop()
    written = sorted(p.relative_to(home).as_posix() for p in home.rglob("*") if p.is_file() and not p.is_symlink())
    assert written == ["out/ok.txt"]
    for entry in ("'a\\n../.bashrc'", "'b\\x1b[2Jc'", "'/etc/abs'", "'sub/../../up'", "'link/.profile'"):
        assert entry in str(refused.value)


@pytest.mark.parametrize("name", ["", "/abs", "a/../b", "..", "./x", "a//b", "a\nb", "a\x00b", "a\x7fb"])
def test_safe_local_path_refuses(name: str, tmp_path: Path) -> None:
    assert main.safe_local_path(tmp_path, name) is None


def test_safe_local_path_keeps_ordinary_names(tmp_path: Path) -> None:
    assert main.safe_local_path(tmp_path, "sub/dir/file name.txt") == tmp_path / "sub" / "dir" / "file name.txt"
