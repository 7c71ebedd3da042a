"""Where a local cluster keeps its files: `.cluster/` of the checkout, or $DEVCLUSTER_DIR."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def cluster_dir() -> Path:
    return Path(os.environ.get("DEVCLUSTER_DIR", REPO_ROOT / ".cluster"))


@dataclass
class Paths:
    root: Path = field(default_factory=cluster_dir)

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def pods(self) -> Path:
        return self.root / "pods"

    @property
    def volumes(self) -> Path:
        return self.root / "volumes"

    def log(self, component: str) -> Path:
        return self.logs / f"{component}.log"
