"""The real node's two runtimes as containerd and the runsc shim read them (TOML), without a node."""

from __future__ import annotations

import tomllib
from pathlib import Path

from devcluster.realnode import configs


def test_containerd_has_runc_by_default_and_runsc_as_a_second_handler(tmp_path: Path) -> None:
    dirs = configs.NodeDirs(tmp_path)
    parsed = tomllib.loads(configs.containerd_config(dirs, tmp_path / "cni", "/usr/bin/runc"))
    containerd = parsed["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]
    assert containerd["default_runtime_name"] == "runc"
    runsc = containerd["runtimes"][configs.RUNSC_HANDLER]
    assert runsc["runtime_type"] == "io.containerd.runsc.v1"
    assert runsc["options"] == {"TypeUrl": "io.containerd.runsc.v1.options", "ConfigPath": str(dirs.runsc_config)}


def test_runsc_config_names_this_nodes_binary_root_and_platform(tmp_path: Path) -> None:
    dirs = configs.NodeDirs(tmp_path)
    parsed = tomllib.loads(configs.runsc_config(dirs, Path("/cache/runsc")))
    assert parsed["binary_name"] == "/cache/runsc"
    assert parsed["root"] == str(dirs.runsc_root) and parsed["root"].startswith(str(tmp_path))
    assert parsed["runsc_config"]["platform"] == configs.GVISOR_PLATFORM
    assert parsed["runsc_config"]["network"] == "sandbox"
