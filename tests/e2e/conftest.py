"""The local control plane as a session fixture: reused when already up, else started and stopped here."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from devcluster import build
from devcluster.cluster import Cluster, Paths

# Before anything imports the kubernetes client: it reads $KUBECONFIG once, at import time.
os.environ["KUBECONFIG"] = str(Paths().kubeconfig)


class Kube:
    """kubectl against the local control plane, plus waits with bounded deadlines."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.kubeconfig = str(cluster.paths.kubeconfig)

    def run(
        self, *args: str, input: str | None = None, check: bool = True, kubeconfig: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        cmd = [str(build.KUBERNETES.path("kubectl")), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr or proc.stdout}")
        return proc

    def apply(
        self, *docs: dict[str, Any], namespace: str | None = None, check: bool = True, kubeconfig: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        args = ["apply", "-f", "-"] + (["-n", namespace] if namespace else [])
        return self.run(*args, input=yaml.safe_dump_all(list(docs)), check=check, kubeconfig=kubeconfig)

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        args = ["get", kind, name, "-o", "json"] + (["-n", namespace] if namespace else [])
        proc = self.run(*args, check=False)
        if proc.returncode != 0:
            if "NotFound" in proc.stderr:
                return None
            raise AssertionError(proc.stderr)
        return dict(json.loads(proc.stdout))

    def list(self, kind: str, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        args = ["get", kind, "-n", namespace, "-o", "json"] + (["-l", selector] if selector else [])
        return list(json.loads(self.run(*args).stdout)["items"])

    def wait_for(self, what: str, check: Callable[[], Any], timeout: float = 60.0, interval: float = 0.2) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = check()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")

    def condition(self, obj: dict[str, Any] | None, ctype: str) -> dict[str, Any] | None:
        for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
            if cond.get("type") == ctype:
                return dict(cond)
        return None

    def is_true(self, obj: dict[str, Any] | None, ctype: str) -> bool:
        cond = self.condition(obj, ctype)
        return bool(cond and cond.get("status") == "True")


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    started = c.up()
    os.environ["KUBECONFIG"] = str(c.paths.kubeconfig)
    try:
        yield c
    finally:
        if started and not os.environ.get("DEVCLUSTER_KEEP"):
            c.down()


@pytest.fixture(scope="session")
def kube(cluster: Cluster) -> Kube:
    return Kube(cluster)


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    kube.run("create", "namespace", name)
    yield name
    kube.run("delete", "namespace", name, "--wait=false", check=False)
