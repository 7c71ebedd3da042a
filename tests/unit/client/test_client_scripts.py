"""The shell scripts the client runs in the pod are files (scripts/*.sh) that shellcheck lints."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from langchain_k8s_client import commands

SCRIPTS = Path(commands.__file__).parent / "scripts"


def test_scripts_are_sent_without_comments_and_with_includes_inlined() -> None:
    upload = commands.load_script("upload.sh")
    assert "# " not in upload.splitlines()[0] and ". ./" not in upload
    assert upload.startswith(commands.load_script("prelude.sh") + "\n")
    assert "phys()" in upload and upload.endswith("shift 3; done")


def test_every_script_file_is_used() -> None:
    source = Path(commands.__file__).read_text()
    included = {
        line.split("./")[1]
        for p in SCRIPTS.glob("*.sh")
        for line in p.read_text().splitlines()
        if line.startswith(". ./")
    }
    for path in SCRIPTS.glob("*.sh"):
        assert f'load_script("{path.name}")' in source or path.name in included, path.name


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed (make lint needs it)")
def test_shellcheck_is_clean() -> None:
    proc = subprocess.run(
        ["shellcheck", "-x", *sorted(p.name for p in SCRIPTS.glob("*.sh"))],
        cwd=SCRIPTS,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout
