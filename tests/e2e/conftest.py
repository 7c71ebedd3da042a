"""The local control plane as a session fixture: reused when already up, else started and stopped here."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import build
from devcluster.cluster import Cluster, Paths, node_kind
from testkit.manifests import GVISOR
from testkit.operator_args import network_args

# Before anything imports the kubernetes client: it reads $KUBECONFIG once, at import time.
os.environ["KUBECONFIG"] = str(Paths().kubeconfig)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One suite, two kinds of node: `realnode` tests need containerd and a kubelet (DEVCLUSTER_NODE=real);
    `kwoknode` tests exercise the simulated node itself (the pod runner, 127.x pod IPs)."""
    kind = node_kind()
    for item in items:
        if "realnode" in item.keywords and kind != "real":
            item.add_marker(pytest.mark.skip(reason="needs the real node (make test runs it with NODE=real)"))
        kwok_only = item.get_closest_marker("kwoknode")
        if kwok_only and kind != "kwok":
            why = kwok_only.kwargs.get("reason", "exercises the simulated node")
            item.add_marker(pytest.mark.skip(reason=f"kwok node only: {why}"))


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


ROUTER_ARGS = ["--sandbox-router=agent-sandbox-system/app=sandbox-router", "--sandbox-router-authorizes"]
"""The operator's flags that admit devcluster's sandbox router (upstream's deploy/) to every sandbox."""

# A test parametrized by these runs once on runc (no runtimeClassName) and, on the real node, once on gVisor.
RUNTIMES = [pytest.param(None, id="runc"), pytest.param(GVISOR, id="gvisor", marks=pytest.mark.realnode)]


def webhook_client_auth_args(cluster: Cluster) -> list[str]:
    """Issue 49 item 8: the webhook takes only the API server's client certificate wherever the API server
    presents one (devcluster's does, as its AdmissionConfiguration): every test's operator runs as `make
    install` and the chart's documented path run it, so admission is proven through the authenticated path."""
    from devcluster.cluster import WEBHOOK_CLIENT_CA, WEBHOOK_CLIENT_NAME

    ca = cluster.paths.pki / f"{WEBHOOK_CLIENT_CA}.crt"
    return [f"--webhook-client-ca={ca}", f"--webhook-client-name={WEBHOOK_CLIENT_NAME}"] if ca.is_file() else []


class OperatorProcess:
    """The operator as a real process (python -m agentsession_operator) against the local control plane.
    ``client_auth=False``: its webhook answers any caller (the operator's own default)."""

    def __init__(
        self,
        cluster: Cluster,
        kubeconfig: str | None = None,
        extra_args: list[str] | None = None,
        log_name: str = "operator-e2e.log",
        client_auth: bool = True,
    ) -> None:
        self.cluster = cluster
        self.kubeconfig = kubeconfig or str(cluster.paths.kubeconfig)
        auth = webhook_client_auth_args(cluster) if client_auth else []
        self.extra_args = [*network_args(), *auth, *(extra_args or [])]
        self.log = cluster.paths.logs / log_name
        self.proc: subprocess.Popen[bytes] | None = None
        self.health_port = 0
        self.metrics_port = 0
        self.webhook_port = 0

    def start(self) -> None:
        import sys

        from devcluster.ports import free_port

        self.health_port, self.metrics_port, self.webhook_port = free_port(), free_port(), free_port()
        if "--webhook-port" not in self.extra_args:  # it serves a webhook: the configuration it patches
            from tests.e2e import install

            install.ensure_dev_webhook_configuration(self.cluster)
        env = dict(os.environ, KUBECONFIG=self.kubeconfig)
        args = [
            "--bind",
            "127.0.0.1",
            "--health-port",
            str(self.health_port),
            "--metrics-port",
            str(self.metrics_port),
            "--webhook-port",
            str(self.webhook_port),
            *self.extra_args,
        ]  # a later --webhook-port wins
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agentsession_operator", *args], stdout=out, stderr=subprocess.STDOUT, env=env
            )
        import socket
        import urllib.request

        # Ready means healthy and, when it serves a webhook, listening there: kopf starts the webhook server
        # and the liveness endpoint side by side, and on loaded cores /healthz can answer first.
        serves_webhook = "--webhook-port" not in self.extra_args
        healthy = False
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # The log's end in the message: CI removes the cluster's folder, and with it the log.
            assert self.proc.poll() is None, f"operator exited; log {self.log}:\n{self.log.read_text()[-3000:]}"
            try:
                if not healthy:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=1):
                        healthy = True
                if serves_webhook:
                    socket.create_connection(("127.0.0.1", self.webhook_port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"operator not ready after 60 s (healthy: {healthy}); log {self.log}")

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind, as when a node dies."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()


@pytest.fixture(scope="session")
def operator(cluster: Cluster, kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """The operator as it runs in a cluster: with its ServiceAccount's token and RBAC, not as admin."""
    from tests.e2e import install

    kube.run("apply", "--server-side", "--force-conflicts", "-f", str(Path(__file__).parents[2] / "crds"))
    kubeconfig = install.service_account_kubeconfig(kube, cluster, tmp_path_factory.mktemp("rbac"))
    proc = OperatorProcess(cluster, kubeconfig=kubeconfig)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def pool_namespace(kube: Kube, operator: OperatorProcess, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the module's own holding examples/00-python-pool.yaml (the `python-pool` warm pool and
    its template), with the operator running; named after the module (test_ts_client: `ts-client-<hex>`)."""
    module = request.module.__name__.rpartition(".")[2].removeprefix("test_").replace("_", "-")
    name = f"{module}-{uuid.uuid4().hex[:6]}"
    kube.run("create", "namespace", name)
    kube.run("apply", "-n", name, "-f", str(Path(__file__).parents[2] / "examples" / "00-python-pool.yaml"))
    yield name
    kube.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def hibernating_operator(
    cluster: Cluster, kube: Kube, operator: OperatorProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The shared operator restarted with the node agent (and the agent installed, Ready once that operator
    signed its certificate); as before afterwards. Real node only (devcluster/nodeagent.py)."""
    from devcluster import nodeagent

    nodeagent.install(cluster)
    extra = nodeagent.operator_args()
    operator.stop()
    operator.extra_args += extra
    operator.start()
    try:
        nodeagent.wait_ready(cluster)  # its certificate signed by the operator just started
        yield operator
    finally:
        operator.stop()
        operator.extra_args = [a for a in operator.extra_args if a not in extra]
        operator.start()
        # Leave the cluster as found: test_install_image's uninstall checks no agentsession RBAC is left.
        nodeagent.uninstall(cluster)
