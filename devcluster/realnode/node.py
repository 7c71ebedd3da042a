"""A real node: containerd 2.x with runc, a kubelet, kube-proxy and kube-router's NetworkPolicy controller.

Start-up: certificates and kubeconfigs -> the node's network namespace -> the API server forwarder ->
containerd -> kubelet (wait for the Node to be Ready) -> kube-proxy -> the NetworkPolicy controller -> the
volume provisioner. Tear-down goes the other way and sweeps whatever a hard kill left behind: containers
(by runc's state directory), shims, mounts below the node's directory, empty pod cgroups, pod network
namespaces and the node's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from devcluster import build, kubeconfig, pki, processes, versions
from devcluster.nodes import AGENT_SANDBOX_NAMESPACE, ControlPlane
from devcluster.realnode import configs, network

NODE_NAME = "devcluster-real-1"
NODE_LABELS = {"agentsession.dev/node": "real", "agentsession.dev/gvisor": "true"}
"""The node's labels (its kubelet's --node-labels): agentsession.dev/gvisor, its containerd has the runsc
handler, is where the node agent's DaemonSet runs (config/components/nodeagent's nodeSelector)."""
# Inside the node's namespace, containerd pulls from here; the forwarder carries it to the host's registry.
NODE_REGISTRY = "127.0.0.1:5000"
CGROUP_ROOT = Path("/sys/fs/cgroup")


class RealNode:
    name = NODE_NAME
    pod_cidr = network.POD_CIDR

    def __init__(self, host: ControlPlane, registry_port: int | None = None) -> None:
        """`registry_port`: the host's image registry containerd pulls from (None to stop a node)."""
        self.cluster = host
        self.net = network.NodeNetwork()
        self.dirs = configs.NodeDirs(host.paths.root / "node")
        self.registry_port = registry_port

    def status(self) -> str:
        return f"real node {NODE_NAME} (containerd {versions.CONTAINERD}, kube-router), pods in {self.pod_cidr}"

    # ---- helpers -----------------------------------------------------------------------------
    @property
    def pki(self) -> Path:
        return self.cluster.paths.pki

    @property
    def api_port(self) -> int:
        return int(self.cluster.state["ports"]["apiserver"])

    def _kubeconfig(self, name: str, user: str) -> Path:
        return kubeconfig.write(
            self.dirs.root / f"{name}.kubeconfig",
            f"https://{network.NODE_IP}:{self.api_port}",
            self.pki / "ca.crt",
            pki.KeyPair(self.pki / f"{name}.crt", self.pki / f"{name}.key"),
            user,
        )

    def _start_inside(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> int:
        return self.cluster.start_process(name, self.net.enter(cmd), env=env)

    # ---- up ----------------------------------------------------------------------------------
    def certificates(self) -> None:
        """Node certificates (the API server's own SANs are issued by the cluster, see Cluster)."""
        ca = pki.KeyPair(self.pki / "ca.crt", self.pki / "ca.key")
        pki.issue(ca, self.pki, "kubelet", f"system:node:{NODE_NAME}", organization="system:nodes", client=True)
        pki.issue(ca, self.pki, "kubelet-serving", f"system:node:{NODE_NAME}", server_names=(network.NODE_IP,))
        pki.issue(ca, self.pki, "kube-proxy", "system:kube-proxy", client=True)
        # The NetworkPolicy controller of a dev cluster: cluster-wide read of pods, namespaces and policies.
        pki.issue(ca, self.pki, "kube-router", "devcluster:kube-router", organization="system:masters", client=True)

    def up(self) -> None:
        for d in (
            self.dirs.root,
            self.dirs.containerd,
            self.dirs.registry_hosts,
            self.dirs.cni_conf,
            self.dirs.kubelet,
        ):
            d.mkdir(parents=True, exist_ok=True)
        self.certificates()
        self.net.create()
        self.cluster.state["node_netns"] = self.net.netns
        self.cluster.save_state()
        self._start_forwarder()
        self._start_containerd()
        self._start_kubelet()
        self._create_runtime_class()
        self._start_kube_proxy()
        self._start_network_policy()
        self._start_provisioner()

    def _start_forwarder(self) -> None:
        maps = [f"{network.NODE_IP}:{self.api_port}=127.0.0.1:{self.api_port}"]
        if self.registry_port:
            maps.append(f"{NODE_REGISTRY}=127.0.0.1:{self.registry_port}")
        ready = self.dirs.root / "forward.ready"
        ready.unlink(missing_ok=True)
        args = [sys.executable, "-m", "devcluster.realnode.forward", f"--netns={self.net.netns}"]
        args += [f"--map={m}" for m in maps] + [f"--ready-file={ready}"]
        pid = self.cluster.start_process("node-forwarder", args)
        self.cluster.wait("node forwarder", ready.exists, 30, "node-forwarder", pid)

    def _start_containerd(self) -> None:
        config = self.dirs.containerd / "config.toml"
        config.write_text(configs.containerd_config(self.dirs, build.CNI_PLUGINS.bin_dir, _which("runc")))
        self.dirs.runsc_logs.mkdir(parents=True, exist_ok=True)
        self.dirs.runsc_config.write_text(configs.runsc_config(self.dirs, build.GVISOR.path("runsc")))
        (self.dirs.cni_conf / "10-devcluster.conflist").write_text(configs.cni_conflist(self.dirs))
        if self.registry_port:
            from devcluster import registry  # what containerd pulls, and from where

            registry.write_containerd_hosts(self.dirs.registry_hosts, NODE_REGISTRY)
        # containerd finds each runtime's shim on its PATH (containerd-shim-runc-v2, containerd-shim-runsc-v1).
        path = f"{build.CONTAINERD.bin_dir}:{build.GVISOR.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        self.dirs.checkpoints.mkdir(mode=0o700, parents=True, exist_ok=True)
        env = dict(os.environ, PATH=path, **{configs.CHECKPOINT_ROOT_ENV: str(self.dirs.checkpoints)})
        pid = self._start_inside("containerd", [str(build.CONTAINERD.path("containerd")), f"--config={config}"], env)
        self.cluster.wait("containerd", self.dirs.containerd_socket.exists, 60, "containerd", pid)

    def _start_kubelet(self) -> None:
        self._make_cgroup_parent()
        kc = self._kubeconfig("kubelet", f"system:node:{NODE_NAME}")
        config = self.dirs.root / "kubelet.yaml"
        config.write_text(
            configs.kubelet_config(
                self.dirs, self.pki / "ca.crt", (self.pki / "kubelet-serving.crt", self.pki / "kubelet-serving.key")
            )
        )
        self.dirs.resolv_conf.write_text(configs.resolv_conf())
        pid = self._start_inside(
            "kubelet",
            [
                str(build.KUBERNETES_NODE.path("kubelet")),
                f"--config={config}",
                f"--kubeconfig={kc}",
                f"--root-dir={self.dirs.kubelet}",
                f"--cert-dir={self.dirs.kubelet / 'pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={network.NODE_IP}",
                "--node-labels=" + ",".join(f"{k}={v}" for k, v in NODE_LABELS.items()),
                "--v=1",
            ],
        )

        def ready() -> bool:
            node = self.cluster.get_json("node", NODE_NAME)
            if node is None:
                return False
            conditions = node.get("status", {}).get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) and not node["spec"].get(
                "taints"
            )

        self.cluster.wait("kubelet (node Ready)", ready, 120, "kubelet", pid)
        if not (self.cluster.get_json("node", NODE_NAME) or {}).get("spec", {}).get("podCIDR"):
            patch = {"spec": {"podCIDR": network.NODE_POD_CIDR, "podCIDRs": [network.NODE_POD_CIDR]}}
            self.cluster.kubectl("patch", "node", NODE_NAME, "--type=merge", "-p", json.dumps(patch))

    def _create_runtime_class(self) -> None:
        """RuntimeClass `gvisor` -> containerd's runsc handler: a template opts in with runtimeClassName."""
        self.cluster.apply(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {"name": configs.GVISOR_RUNTIME_CLASS},
                "handler": configs.RUNSC_HANDLER,
            }
        )

    def _start_kube_proxy(self) -> None:
        kc = self._kubeconfig("kube-proxy", "system:kube-proxy")
        config = self.dirs.root / "kube-proxy.yaml"
        config.write_text(configs.kube_proxy_config(kc, NODE_NAME))
        pid = self._start_inside("kube-proxy", [str(build.KUBERNETES_NODE.path("kube-proxy")), f"--config={config}"])
        self.cluster.wait(
            "kube-proxy",
            lambda: (
                "Starting endpoint slice config controller"
                in processes.log_tail(self.cluster.paths.log("kube-proxy"), 400)
                or "Caches are synced" in processes.log_tail(self.cluster.paths.log("kube-proxy"), 400)
            ),
            60,
            "kube-proxy",
            pid,
        )

    def _start_network_policy(self) -> None:
        kc = self._kubeconfig("kube-router", "devcluster:kube-router")
        pid = self._start_inside(
            "kube-router",
            [
                str(build.KUBE_ROUTER.path("kube-router")),
                f"--kubeconfig={kc}",
                f"--hostname-override={NODE_NAME}",
                "--run-firewall=true",
                "--run-router=false",
                "--run-service-proxy=false",
                "--run-loadbalancer=false",
                "--enable-ipv4=true",
                "--enable-ipv6=false",
                f"--service-cluster-ip-range={network.SERVICE_CIDR}",
                "--metrics-port=0",
                "--health-port=0",
            ],
        )
        self.cluster.wait(
            "kube-router (NetworkPolicy controller)",
            lambda: "network policy" in processes.log_tail(self.cluster.paths.log("kube-router"), 400).lower(),
            60,
            "kube-router",
            pid,
        )

    def _start_provisioner(self) -> None:
        env = dict(
            os.environ, KUBECONFIG=str(self.cluster.paths.kubeconfig), DEVCLUSTER_DIR=str(self.cluster.paths.root)
        )
        self.cluster.start_process(
            "volume-provisioner", [sys.executable, "-m", "devcluster.podrunner", "--provisioner-only"], env=env
        )

    def serve(self) -> None:
        """agent-sandbox's sandbox router, deployed as upstream documents it (`kubectl apply -f deploy/`)."""
        deploy = build.module_dir("sigs.k8s.io/agent-sandbox", versions.AGENT_SANDBOX) / "sandbox-router" / "deploy"
        self.cluster.kubectl("apply", "-f", str(deploy))
        # Upstream's NetworkPolicy lets the router reach the API server only on 443/6443 in namespace default.
        # Here the Service's endpoint is this node's address and a random port (the forwarder to the host's
        # API server): once kube-router enforced the policy, the router's first LIST was dropped and it
        # crash-looped ("pod cache failed initial sync"). A second policy allows exactly that endpoint.
        self.cluster.apply(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": "sandbox-router-apiserver", "namespace": AGENT_SANDBOX_NAMESPACE},
                "spec": {
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "sandbox-router"}},
                    "policyTypes": ["Egress"],
                    "egress": [
                        {
                            "to": [{"ipBlock": {"cidr": f"{network.NODE_IP}/32"}}],
                            "ports": [{"port": self.api_port, "protocol": "TCP"}],
                        }
                    ],
                },
            }
        )
        self.cluster.kubectl(
            "-n", AGENT_SANDBOX_NAMESPACE, "rollout", "status", "deployment/sandbox-router", "--timeout=120s"
        )

    # ---- down --------------------------------------------------------------------------------
    def down(self, pids: dict[str, int]) -> None:
        """Stop the node's processes and sweep what they leave behind (also after a hard kill)."""
        for name in ("volume-provisioner", "kube-router", "kube-proxy", "kubelet"):
            if name in pids:
                processes.stop(pids.pop(name))
        self._kill_containers()
        if "containerd" in pids:
            processes.stop(pids.pop("containerd"))
        self._kill_shims()
        if "node-forwarder" in pids:
            processes.stop(pids.pop("node-forwarder"))
        self._unmount_below(self.dirs.root)
        self._remove_pod_cgroups()
        # Pod network namespaces are bind mounts below the node's state directory: unmounted above.
        network.NodeNetwork(self.cluster.state.get("node_netns", self.net.netns)).destroy()
        shutil.rmtree(self.dirs.root, ignore_errors=True)

    def _kill_containers(self) -> None:
        runc_root = self.dirs.containerd / "runc"
        for root in [runc_root, *runc_root.glob("*")] if runc_root.exists() else []:
            proc = subprocess.run(["runc", f"--root={root}", "list", "-q"], capture_output=True, text=True)
            for cid in proc.stdout.split():
                subprocess.run(["runc", f"--root={root}", "delete", "--force", cid], capture_output=True)
        # gVisor sandboxes (runsc-sandbox and its gofer) outlive their shim: delete them by their state.
        runsc = str(build.GVISOR.path("runsc"))
        runsc_roots = [*self.dirs.runsc_root.glob("*")] if self.dirs.runsc_root.exists() else []
        for root in runsc_roots if os.path.exists(runsc) else []:
            proc = subprocess.run([runsc, f"--root={root}", "list", "-quiet"], capture_output=True, text=True)
            for cid in proc.stdout.split():
                subprocess.run([runsc, f"--root={root}", "delete", "-force", cid], capture_output=True)

    def _kill_shims(self) -> None:
        """Shims outlive containerd; this node's name its socket's directory in their -address argument
        (gVisor's sandbox and gofer processes name this node's runsc root in their --root)."""
        needle = str(self.dirs.containerd).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes()
                if (b"containerd-shim" in cmdline or b"runsc" in cmdline) and needle in cmdline:
                    os.kill(int(entry.name), signal.SIGKILL)

    @staticmethod
    def _unmount_below(root: Path) -> None:
        prefix = str(root.resolve()) + "/"
        with open("/proc/self/mounts") as f:
            targets = [line.split()[1].replace("\\040", " ") for line in f]
        for target in sorted((t for t in targets if t.startswith(prefix)), key=len, reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True)

    @staticmethod
    def _make_cgroup_parent() -> None:
        """The kubelet's cgroupRoot must exist in every hierarchy; a new cpuset cgroup starts with no CPUs
        and no memory nodes, so it gets its parent's."""
        for hierarchy in CGROUP_ROOT.iterdir() if CGROUP_ROOT.exists() else []:
            if hierarchy.name == "unified" or not (hierarchy / "cgroup.procs").exists():
                continue
            parent = hierarchy / configs.CGROUP_PARENT
            parent.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (hierarchy / name).exists() and not (parent / name).read_text().strip():
                    (parent / name).write_text((hierarchy / name).read_text())

    @staticmethod
    def _remove_pod_cgroups() -> None:
        """Only this node's tree (configs.CGROUP_PARENT): another cluster's kubelet may be running."""
        for hierarchy in CGROUP_ROOT.iterdir() if CGROUP_ROOT.exists() else []:
            top = hierarchy / configs.CGROUP_PARENT
            if not top.is_dir():
                continue
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()


def _which(cmd: str) -> str:
    path = shutil.which(cmd)
    if path is None:
        raise RuntimeError(f"{cmd} is not installed")
    return path
