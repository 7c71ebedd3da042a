"""The shell scripts the client runs in the pod are files (scripts/*.sh) that shellcheck lints."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from langchain_k8s_client import script_text

PACKAGE = Path(script_text.__file__).parent
SCRIPTS = PACKAGE / "scripts"


def test_scripts_are_sent_without_comments_and_with_includes_inlined() -> None:
    upload = script_text.load_script("upload.sh")
    assert "# " not in upload.splitlines()[0] and ". ./" not in upload
    assert upload.startswith(script_text.load_script("prelude.sh") + "\n")
    assert "phys()" in upload and upload.endswith("shift 3; done")


def test_every_script_file_is_used() -> None:
    source = "".join(p.read_text() for p in PACKAGE.glob("*.py"))  # commands, probe, gnu_grep
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
