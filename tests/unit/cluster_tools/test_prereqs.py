"""The host prerequisite table and its check."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from devcluster import prereqs


def test_every_group_maps_commands_to_packages() -> None:
    assert prereqs.COMMANDS[prereqs.KWOK]["bwrap"] == "bubblewrap"
    assert prereqs.COMMANDS[prereqs.KWOK]["setpriv"] == "util-linux"
    for name in ("mmdebstrap", "buildah", "skopeo"):
        assert prereqs.COMMANDS[prereqs.IMAGES][name] == name
    assert prereqs.COMMANDS[prereqs.REAL_NODE]["runc"] == "runc"


def test_missing_names_each_package_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prereqs.shutil, "which", lambda command: None)
    monkeypatch.setattr(prereqs, "FILES", {})
    packages = prereqs.missing([prereqs.KWOK, prereqs.REAL_NODE])
    assert packages == sorted(set(packages))
    assert {"bubblewrap", "runc", "util-linux", "iptables"} <= set(packages)


def test_ensure_without_root_stops_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prereqs.shutil, "which", lambda command: None if command == "bwrap" else "/bin/" + command)
    monkeypatch.setattr(prereqs, "_can_install", lambda: False)
    with pytest.raises(prereqs.PrerequisiteError) as err:
        prereqs.ensure([prereqs.KWOK])
    assert "\n" not in str(err.value)
    assert "apt-get install bubblewrap" in str(err.value)


def test_ensure_installs_once_as_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    installed: list[list[str]] = []
    present: set[str] = set()
    hook = tmp_path / "policy-rc.d"
    monkeypatch.setattr(prereqs, "POLICY_RC_D", hook)
    hooked: list[bool] = []
    monkeypatch.setattr(prereqs.shutil, "which", lambda command: "/bin/x" if command in present else None)
    monkeypatch.setattr(prereqs, "FILES", {})
    monkeypatch.setattr(prereqs, "_can_install", lambda: True)

    class Done:
        returncode = 0
        stderr = ""

    def run(cmd: list[str], **kwargs: object) -> Done:
        installed.append(cmd)
        hooked.append(hook.exists() and "exit 101" in hook.read_text())
        if "install" in cmd:
            present.update({"bwrap", "setpriv"})
        return Done()

    monkeypatch.setattr(prereqs.subprocess, "run", run)
    prereqs.ensure([prereqs.KWOK], out=io.StringIO())
    assert [cmd[1] for cmd in installed] == ["update", "install"]
    assert installed[1][-2:] == ["bubblewrap", "util-linux"]
    # No package may start a service while it installs (prometheus would listen on every address).
    assert hooked == [True, True] and not hook.exists()


def test_the_real_node_needs_every_group() -> None:
    assert prereqs.for_node("kwok") == [prereqs.KWOK]
    assert set(prereqs.for_node("real")) == {prereqs.KWOK, prereqs.REAL_NODE, prereqs.IMAGES}
