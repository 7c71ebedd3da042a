"""Bring the local control plane up and down.

Start-up order: certificates -> etcd -> kube-apiserver -> kube-controller-manager -> kube-scheduler ->
the node -> agent-sandbox CRDs and controller -> the project's CRDs. Every listener is on 127.0.0.1. A
half-started cluster is torn down, and a failure names the component and the tail of its log.

Two kinds of node (`NODE=kwok|real`, env DEVCLUSTER_NODE):
- kwok (default): a fake node whose pods run as bubblewrap-confined processes (the pod runner) on their
  own 127.x address. Starts in seconds; serves thousands of pause pods for the scale benchmarks.
- real: containerd + runc, a kubelet, kube-proxy and a NetworkPolicy controller in a network namespace of
  their own (see devcluster/realnode): real containers, Services and enforced NetworkPolicies.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from devcluster import build, kubeconfig, pki, ports, processes, runtimes, versions
from devcluster.errors import DevclusterError
from devcluster.kwoknode import NODE_NAME, POD_CIDR, KwokNode
from devcluster.nodes import AGENT_SANDBOX_NAMESPACE, Node
from devcluster.paths import REPO_ROOT, Paths, cluster_dir
from devcluster.realnode import network
from devcluster.realnode.node import RealNode

# Routed only into the real node's namespace (on a kwok node nothing routes to it at all).
SERVICE_CIDR = network.SERVICE_CIDR
NODE_KINDS = ("kwok", "real")
__all__ = ["AGENT_SANDBOX_NAMESPACE", "NODE_NAME", "POD_CIDR", "REPO_ROOT", "Cluster", "Paths", "cluster_dir"]


def node_kind() -> str:
    kind = os.environ.get("DEVCLUSTER_NODE", "kwok") or "kwok"
    if kind not in NODE_KINDS:
        raise ClusterError(f"DEVCLUSTER_NODE={kind!r}: expected one of {', '.join(NODE_KINDS)}")
    return kind


WEBHOOK_CLIENT_CA = "webhook-client-ca"
"""pki/webhook-client-ca.crt: the CA of the client certificate the API server presents to admission webhooks."""
WEBHOOK_CLIENT_NAME = "kube-apiserver-webhook-client"
"""Its common name (the operator's --webhook-client-name)."""
AGENT_SANDBOX_CONFIGMAP = "agent-sandbox-config"


class ClusterError(DevclusterError):
    pass


def _free_port() -> int:
    return ports.free_port()


def _wait(what: str, check: Callable[[], bool], timeout: float, log: Path | None, pid: int | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid is not None and not processes.alive(pid):
            raise ClusterError(f"{what} exited during start-up; log {log}:\n{processes.log_tail(log) if log else ''}")
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.1)
    tail = processes.log_tail(log) if log else ""
    raise ClusterError(f"{what} not ready after {timeout:.0f} s; log {log}:\n{tail}")


class Cluster:
    """The local control plane rooted at `.cluster/` (or $DEVCLUSTER_DIR)."""

    def __init__(self, paths: Paths | None = None, out: Any = sys.stderr) -> None:
        self.paths = paths or Paths()
        self.out = out
        self.state: dict[str, Any] = self._load_state()

    # ---- state -------------------------------------------------------------------------------
    def _load_state(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.paths.state.read_text()))
        except (OSError, ValueError):
            return {}

    def save_state(self) -> None:
        self.paths.state.write_text(json.dumps(self.state, indent=2))

    @property
    def node(self) -> str:
        """The kind of node of the running (or last started) cluster."""
        return str(self.state.get("node", "kwok"))

    def _say(self, message: str) -> None:
        print(f"[devcluster] {message}", file=self.out, flush=True)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.state['ports']['apiserver']}"

    def _ssl_context(self, client: str = "admin") -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.paths.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.paths.pki / f"{client}.crt"), str(self.paths.pki / f"{client}.key"))
        return ctx

    def api_get(self, path: str, timeout: float = 5.0) -> bytes:
        with urllib.request.urlopen(self.server + path, context=self._ssl_context(), timeout=timeout) as resp:
            return bytes(resp.read())

    def is_running(self) -> bool:
        pids = self.state.get("pids", {})
        if not pids or not all(processes.alive(pid) for pid in pids.values()):
            return False
        try:
            return self.api_get("/readyz") == b"ok"
        except (OSError, urllib.error.URLError, KeyError):
            return False

    # ---- kubectl -----------------------------------------------------------------------------
    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(build.KUBERNETES.path("kubectl")), f"--kubeconfig={self.paths.kubeconfig}", *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def apply(self, manifest: dict[str, Any] | list[dict[str, Any]]) -> None:
        docs = manifest if isinstance(manifest, list) else [manifest]
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(docs))

    # ---- up ----------------------------------------------------------------------------------
    def up(self, node: str | None = None) -> bool:
        """Start everything; returns False (a no-op) when a cluster with this kind of node is already running."""
        node = node or node_kind()
        if self.is_running():
            if self.node != node:
                raise ClusterError(f"a cluster with a {self.node} node is running; stop it first (make cluster-down)")
            self._say(f"already running (kubeconfig {self.paths.kubeconfig}); nothing to do")
            return False
        if self.state:
            self._say("found a stale cluster; cleaning it up first")
            self.down(quiet=True)
        started = time.monotonic()
        # Every entry point (make demo, the tests, the benchmarks) starts here; build_all checks the host
        # packages first, cached binaries or not.
        build.build_all(self.out, node=node)
        runtimes.prepare(self.out)
        for d in (self.paths.root, self.paths.pki, self.paths.logs, self.paths.pods, self.paths.volumes):
            d.mkdir(parents=True, exist_ok=True)
        self.state = {"pids": {}, "ports": {}, "started": time.time(), "node": node}
        self.save_state()
        try:
            self._certificates()
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
            self._start_scheduler()
            if node == "real":
                self._start_registry()
            the_node = self.node_for(node)
            the_node.up()
            self._say(f"{the_node.status()}: ready")
            self._install_agent_sandbox()
            self.start_agent_sandbox_controller()
            the_node.serve()
            self._say("pod runner ready" if node == "kwok" else "sandbox router running (svc/sandbox-router-svc)")
            self._install_project_crds()
            self._wait_default_service_account()
        except BaseException:
            self._say("start-up failed; tearing down what was started")
            self.down(quiet=True, keep_logs=True)
            raise
        self._say(f"ready in {time.monotonic() - started:.1f} s; export KUBECONFIG={self.paths.kubeconfig}")
        return True

    def _certificates(self) -> None:
        d = self.paths.pki
        ca = pki.make_ca(d, "ca", "devcluster-ca")
        etcd_ca = pki.make_ca(d, "etcd-ca", "devcluster-etcd-ca")
        pki.issue(etcd_ca, d, "etcd-server", "etcd", server_names=("127.0.0.1", "localhost"), client=True)
        pki.issue(etcd_ca, d, "etcd-client", "kube-apiserver-etcd-client", client=True)
        pki.issue(
            ca,
            d,
            "apiserver",
            "kube-apiserver",
            server_names=(
                "127.0.0.1",
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
                network.KUBERNETES_SERVICE_IP,
                # The real node reaches the API server through a forwarder at its own address.
                network.NODE_IP,
            ),
        )
        pki.issue(ca, d, "admin", "devcluster-admin", organization="system:masters", client=True)
        pki.issue(ca, d, "controller-manager", "system:kube-controller-manager", client=True)
        pki.issue(ca, d, "scheduler", "system:kube-scheduler", client=True)
        pki.issue(
            ca,
            d,
            "apiserver-kubelet-client",
            "kube-apiserver-kubelet-client",
            organization="system:masters",
            client=True,
        )
        # The client certificate the API server presents to admission webhooks (AdmissionConfiguration
        # kubeConfigFile), from a CA of its own: a webhook trusting it trusts the API server, not every
        # client certificate the cluster CA signs (kubelets, users).
        webhook_client_ca = pki.make_ca(d, WEBHOOK_CLIENT_CA, "devcluster-webhook-client-ca")
        pki.issue(webhook_client_ca, d, "apiserver-webhook-client", WEBHOOK_CLIENT_NAME, client=True)
        pki.service_account_keys(d)

    def start_process(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> int:
        """Start a component detached, logging to logs/<name>.log; `down` stops it."""
        log = self.paths.log(name)
        pid = processes.start(cmd, log, env=env)
        self.state["pids"][name] = pid
        self.save_state()
        return pid

    def wait(self, what: str, check: Callable[[], bool], timeout: float, component: str, pid: int) -> None:
        _wait(what, check, timeout, self.paths.log(component), pid)

    def get_json(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        args = ["get", kind, name, "-o", "json"] + (["-n", namespace] if namespace else [])
        proc = self.kubectl(*args, check=False)
        return dict(json.loads(proc.stdout)) if proc.returncode == 0 else None

    def node_for(self, kind: str) -> Node:
        """The node of this kind, joined to this cluster (the registry's port: the real node pulls there)."""
        if kind == "real":
            return RealNode(self, registry_port=self.state.get("ports", {}).get("registry"))
        return KwokNode(self)

    @property
    def pod_cidr(self) -> str:
        """Where this cluster's pods get their addresses."""
        return self.node_for(self.node).pod_cidr

    @property
    def node_name(self) -> str:
        return self.node_for(self.node).name

    def _start_etcd(self) -> None:
        d = self.paths.pki
        ports = self.state["ports"]  # a restart keeps the ports the API server and clients know
        client, peer = ports.get("etcd") or _free_port(), ports.get("etcd_peer") or _free_port()
        self.state["ports"].update(etcd=client, etcd_peer=peer)
        tls = [
            f"--trusted-ca-file={d / 'etcd-ca.crt'}",
            f"--cert-file={d / 'etcd-server.crt'}",
            f"--key-file={d / 'etcd-server.key'}",
            "--client-cert-auth",
        ]
        peer_tls = [
            f"--peer-trusted-ca-file={d / 'etcd-ca.crt'}",
            f"--peer-cert-file={d / 'etcd-server.crt'}",
            f"--peer-key-file={d / 'etcd-server.key'}",
            "--peer-client-cert-auth",
        ]
        pid = self.start_process(
            "etcd",
            [
                str(build.ETCD.path("etcd")),
                "--name=devcluster",
                f"--data-dir={self.paths.root / 'etcd'}",
                f"--listen-client-urls=https://127.0.0.1:{client}",
                f"--advertise-client-urls=https://127.0.0.1:{client}",
                f"--listen-peer-urls=https://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=https://127.0.0.1:{peer}",
                f"--initial-cluster=devcluster=https://127.0.0.1:{peer}",
                "--listen-metrics-urls=",
                "--unsafe-no-fsync",  # a throw-away development store: speed over durability
                "--quota-backend-bytes=4294967296",
                *tls,
                *peer_tls,
            ],
        )
        ctx = ssl.create_default_context(cafile=str(d / "etcd-ca.crt"))
        ctx.load_cert_chain(str(d / "etcd-client.crt"), str(d / "etcd-client.key"))

        def healthy() -> bool:
            with urllib.request.urlopen(f"https://127.0.0.1:{client}/health", context=ctx, timeout=2) as r:
                return bool(json.loads(r.read()).get("health") == "true")

        _wait("etcd", healthy, 60, self.paths.log("etcd"), pid)
        self._say("etcd ready")

    def _start_apiserver(self) -> None:
        d = self.paths.pki
        port = self.state["ports"].get("apiserver") or _free_port()
        self.state["ports"]["apiserver"] = port
        pid = self.start_process(
            "kube-apiserver",
            [
                str(build.KUBERNETES.path("kube-apiserver")),
                f"--etcd-servers=https://127.0.0.1:{self.state['ports']['etcd']}",
                f"--etcd-cafile={d / 'etcd-ca.crt'}",
                f"--etcd-certfile={d / 'etcd-client.crt'}",
                f"--etcd-keyfile={d / 'etcd-client.key'}",
                "--bind-address=127.0.0.1",
                *self._advertise_flags(),
                f"--secure-port={port}",
                f"--tls-cert-file={d / 'apiserver.crt'}",
                f"--tls-private-key-file={d / 'apiserver.key'}",
                f"--client-ca-file={d / 'ca.crt'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--admission-control-config-file={self._admission_configuration()}",
                f"--kubelet-client-certificate={d / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={d / 'apiserver-kubelet-client.key'}",
                # By address, never by a DNS lookup of the node's name (no resolver query leaves the machine).
                "--kubelet-preferred-address-types=InternalIP",
                "--allow-privileged=true",
                # /debug/pprof for a benchmark's profile (DEVCLUSTER_PROFILING=1; admin only, loopback).
                f"--profiling={'true' if os.environ.get('DEVCLUSTER_PROFILING') == '1' else 'false'}",
                "--event-ttl=1h",
                "--enable-priority-and-fairness=false",
            ],
        )
        _wait(
            "kube-apiserver",
            lambda: self.api_get("/readyz", timeout=2) == b"ok",
            120,
            self.paths.log("kube-apiserver"),
            pid,
        )
        server = self.server
        kubeconfig.write(
            self.paths.kubeconfig,
            server,
            d / "ca.crt",
            pki.KeyPair(d / "admin.crt", d / "admin.key"),
            "devcluster-admin",
        )
        for name in ("controller-manager", "scheduler"):
            kubeconfig.write(
                self.paths.root / f"{name}.kubeconfig",
                server,
                d / "ca.crt",
                pki.KeyPair(d / f"{name}.crt", d / f"{name}.key"),
                f"system:kube-{name}",
            )
        self._say(f"kube-apiserver ready at {server}")

    def _admission_configuration(self) -> Path:
        """The API server presents its webhook client certificate to every admission webhook (user "*")."""
        d = self.paths.pki
        kubeconfig_path = self.paths.root / "admission-webhook-client.kubeconfig"
        client = {"client-certificate": str(d / "apiserver-webhook-client.crt")}
        client["client-key"] = str(d / "apiserver-webhook-client.key")
        kubeconfig_path.write_text(
            yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "users": [{"name": "*", "user": client}]})
        )
        kubeconfig_path.chmod(0o600)
        webhook = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(kubeconfig_path),
        }
        config = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [
                {"name": "ValidatingAdmissionWebhook", "configuration": dict(webhook)},
                {"name": "MutatingAdmissionWebhook", "configuration": dict(webhook)},
            ],
        }
        path = self.paths.root / "admission-configuration.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def _advertise_flags(self) -> list[str]:
        if self.node == "real":
            # Pods reach the API server through the `kubernetes` Service, whose endpoint is the node
            # forwarder's listener (inside the node's namespace) in front of 127.0.0.1.
            return [f"--advertise-address={network.NODE_IP}"]
        # Loopback addresses are refused in Endpoints; the apiserver must not publish its own.
        return ["--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"]

    def _start_controller_manager(self) -> None:
        d = self.paths.pki
        self.start_process(
            "kube-controller-manager",
            [
                str(build.KUBERNETES.path("kube-controller-manager")),
                f"--kubeconfig={self.paths.root / 'controller-manager.kubeconfig'}",
                f"--authentication-kubeconfig={self.paths.root / 'controller-manager.kubeconfig'}",
                f"--authorization-kubeconfig={self.paths.root / 'controller-manager.kubeconfig'}",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={d / 'sa.key'}",
                f"--root-ca-file={d / 'ca.crt'}",
                f"--cluster-signing-cert-file={d / 'ca.crt'}",
                f"--cluster-signing-key-file={d / 'ca.key'}",
                "--allocate-node-cidrs=false",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--concurrent-gc-syncs=20",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                # The node's pod CIDR is ours (POD_CIDR), not allocated by node IPAM.
                "--controllers=*,-node-ipam-controller",
            ],
        )

    def _start_scheduler(self) -> None:
        kc = self.paths.root / "scheduler.kubeconfig"
        self.start_process(
            "kube-scheduler",
            [
                str(build.KUBERNETES.path("kube-scheduler")),
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--leader-elect=false",
            ],
        )

    def _install_agent_sandbox(self) -> None:
        crds = build.module_dir("sigs.k8s.io/agent-sandbox", versions.AGENT_SANDBOX) / "k8s" / "crds"
        self.kubectl("apply", "--server-side", "-f", str(crds))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds))
        self.kubectl("create", "namespace", AGENT_SANDBOX_NAMESPACE, check=False)

    def allowed_label_domains(self) -> str | None:
        """The controller's label-domain allowlist, as its ConfigMap says (None when absent)."""
        proc = self.kubectl(
            "get", "configmap", AGENT_SANDBOX_CONFIGMAP, "-n", AGENT_SANDBOX_NAMESPACE, "-o", "json", check=False
        )
        if proc.returncode != 0:
            return None
        data = json.loads(proc.stdout).get("data") or {}
        value = data.get("allowed-label-domains")
        return str(value) if value is not None else None

    def start_agent_sandbox_controller(self) -> None:
        """(Re)start the controller; it reads agent-sandbox-config once at start, as in a cluster.

        In a cluster the ConfigMap is mounted at /etc/sandbox-config; here bubblewrap mounts it there.
        """
        old = self.state["pids"].pop("agent-sandbox-controller", None)
        if old:
            processes.stop(old)
        config_dir = self.paths.root / "agent-sandbox-config"
        shutil.rmtree(config_dir, ignore_errors=True)
        config_dir.mkdir()
        domains = self.allowed_label_domains()
        if domains is not None:
            (config_dir / "allowed-label-domains").write_text(domains)
        controller = [
            str(build.AGENT_SANDBOX.path("agent-sandbox-controller")),
            f"--kubeconfig={self.paths.kubeconfig}",
            "--extensions",
            "--leader-elect=false",
            "--metrics-bind-address=0",
            "--health-probe-bind-address=0",
            "--kube-api-burst=200",
        ]
        cmd = [
            "bwrap",
            "--ro-bind",
            "/",
            "/",
            "--tmpfs",
            "/etc",
            "--ro-bind",
            str(config_dir),
            "/etc/sandbox-config",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--",
            *controller,
        ]
        pid = self.start_process("agent-sandbox-controller", cmd)
        _wait(
            "agent-sandbox-controller",
            lambda: "Starting workers" in processes.log_tail(self.paths.log("agent-sandbox-controller"), 400),
            60,
            self.paths.log("agent-sandbox-controller"),
            pid,
        )
        self._say(
            f"agent-sandbox controller {versions.AGENT_SANDBOX} running"
            + (f" (allowed-label-domains: {domains})" if domains else "")
        )

    @property
    def registry_address(self) -> str:
        """The real node's image registry on the host (containerd reaches it through the node forwarder)."""
        return f"127.0.0.1:{self.state['ports']['registry']}"

    def _start_registry(self) -> None:
        """The image registry every pod of the real node pulls from, filled with the images built here.

        Its storage outlives the cluster (one per network index), so a restart pushes only what changed.
        """
        from devcluster import images, registry

        port = _free_port()
        self.state["ports"]["registry"] = port
        storage = build.cache_root() / "registry" / str(network.INDEX)
        storage.mkdir(parents=True, exist_ok=True)
        config = self.paths.root / "registry.yml"
        config.write_text(registry.config_yaml(storage, f"127.0.0.1:{port}"))
        # The registry exports OpenTelemetry traces to localhost:4318 unless told not to.
        env = dict(os.environ, OTEL_TRACES_EXPORTER="none", OTEL_SDK_DISABLED="true")
        pid = self.start_process("registry", [str(registry.registry_binary()), "serve", str(config)], env=env)

        def answers() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as r:
                return bool(r.status == 200)

        _wait("image registry", answers, 30, self.paths.log("registry"), pid)
        images.push_all(self.registry_address, out=self.out)
        self._say(f"image registry at {self.registry_address}")

    def _install_project_crds(self) -> None:
        crds = REPO_ROOT / "crds"
        if crds.is_dir() and any(crds.glob("*.yaml")):
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
            self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds))
            self._say("project CRDs installed")

    def _wait_default_service_account(self) -> None:
        _wait(
            "kube-controller-manager (default ServiceAccount)",
            lambda: self.kubectl("get", "serviceaccount", "default", check=False).returncode == 0,
            60,
            self.paths.log("kube-controller-manager"),
            self.state["pids"]["kube-controller-manager"],
        )

    # ---- down --------------------------------------------------------------------------------
    # ---- fault injection (tests): stop and restart one component, keeping its ports and data ----
    def stop_component(self, name: str) -> None:
        """Stop one component (SIGTERM, then SIGKILL after a grace period), e.g. "etcd", "kube-apiserver"."""
        pid = self.state["pids"].pop(name, None)
        if pid:
            processes.stop(pid)
        self.save_state()

    def restart_etcd(self, down_for: float = 0.0) -> None:
        self.stop_component("etcd")
        time.sleep(down_for)
        self._start_etcd()

    def restart_apiserver(self, down_for: float = 0.0) -> None:
        self.stop_component("kube-apiserver")
        time.sleep(down_for)
        self._start_apiserver()

    def down(self, quiet: bool = False, keep_logs: bool = False) -> bool:
        """Stop everything; returns False (a no-op) when nothing was running."""
        pids: dict[str, int] = self.state.get("pids", {})
        if not pids and not self.paths.state.exists():
            if not quiet:
                self._say("not running; nothing to do")
            return False
        # The real node first (a netns left by a hard kill marks one too): its containers before the rest.
        self.node_for("real" if self.state.get("node_netns") else self.node).down(pids)
        # Reverse start order: the pod runner stops every runtime it started on its way out.
        for name in reversed(list(pids)):
            processes.stop(pids[name])
        # A runner killed hard cannot clean up; sweep any runtime it left behind.
        runtimes.kill_leftovers(self.paths.pods)
        for path in (self.paths.root / "etcd", self.paths.pods, self.paths.volumes, self.paths.state):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        if not keep_logs:
            shutil.rmtree(self.paths.logs, ignore_errors=True)
        self.state = {}
        if not quiet:
            self._say("stopped")
        return True
