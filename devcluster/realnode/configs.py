"""The real node's configuration files, as pure functions of paths and addresses (no I/O here)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devcluster.realnode import network

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
CLUSTER_DOMAIN = "cluster.local"
CGROUP_PARENT = f"agentsession-node{network.INDEX}"
"""The kubelet's cgroupRoot: each real-node cluster on the machine gets its own tree. Under the shared
/kubepods, one kubelet took the other's pod cgroups for orphans and killed their containers (exit 137)."""


@dataclass(frozen=True)
class NodeDirs:
    """Every file of the node below one directory (`.cluster/node`), so `down` removes all of it."""

    root: Path

    @property
    def containerd(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd / "containerd.sock"

    @property
    def registry_hosts(self) -> Path:
        return self.containerd / "certs.d"

    @property
    def runsc_root(self) -> Path:
        """gVisor's state (one directory per containerd namespace): the sweep after a hard kill reads it."""
        return self.containerd / "runsc"

    @property
    def runsc_config(self) -> Path:
        return self.containerd / "runsc.toml"

    @property
    def runsc_logs(self) -> Path:
        return self.root / "runsc-logs"

    @property
    def checkpoints(self) -> Path:
        """gVisor checkpoint images, one directory per namespace (the shim's restore extension reads only
        <namespace>/<name> of the pod's own namespace; the node agent writes them)."""
        return self.root / "checkpoints"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_state(self) -> Path:
        return self.root / "cni" / "networks"

    @property
    def kubelet(self) -> Path:
        return self.root / "kubelet"

    @property
    def resolv_conf(self) -> Path:
        return self.root / "resolv.conf"


RUNSC_HANDLER = "runsc"
"""containerd's name for the gVisor runtime: the RuntimeClass `gvisor` (GVISOR_RUNTIME_CLASS) points at it."""
GVISOR_RUNTIME_CLASS = "gvisor"
RESTORE_ANNOTATION = "agentsession.dev/restore-from"
"""The pod annotation naming the checkpoint a gVisor pod restores from (RestoreAnnotation in restoreext)."""
CHECKPOINT_ROOT_ENV = "AGENTSESSION_CHECKPOINT_ROOT"
"""containerd's (so the shim's) environment variable naming NodeDirs.checkpoints (RootEnv in restoreext)."""
# systrap, not kvm: see runsc_config.
GVISOR_PLATFORM = "systrap"


def containerd_config(dirs: NodeDirs, cni_bin: Path, runc: str) -> str:
    """containerd 2.x (config version 3): its own root, state and socket; CRI over runc with cgroupfs,
    and gVisor (runsc) as a second handler for pods of the RuntimeClass `gvisor`."""
    c = dirs.containerd
    cri_runtime = 'plugins."io.containerd.cri.v1.runtime"'
    return f"""version = 3
root = "{c / "root"}"
state = "{c / "state"}"

[grpc]
  address = "{dirs.containerd_socket}"

[ttrpc]
  address = "{c / "containerd.sock.ttrpc"}"

[debug]
  address = "{c / "debug.sock"}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{c / "opt"}"

[plugins."io.containerd.nri.v1.nri"]
  disable = true

[plugins."io.containerd.grpc.v1.cri"]
  # Streaming (exec, logs, port-forward) goes through the kubelet; keep the server on loopback.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{dirs.registry_hosts}"

[{cri_runtime}]
  # Processes here lack CAP_SYS_RESOURCE: without this every pod sandbox fails to set its negative
  # oom_score_adj ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  # Pod network namespaces under this node's own state directory (not /run/netns, shared by every
  # cluster on the machine), so tear-down finds exactly this node's.
  netns_mounts_under_state_dir = true
  [{cri_runtime}.containerd]
    default_runtime_name = "runc"
    [{cri_runtime}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri_runtime}.containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        Root = "{c / "runc"}"
        SystemdCgroup = false
    [{cri_runtime}.containerd.runtimes.{RUNSC_HANDLER}]
      runtime_type = "io.containerd.runsc.v1"
      # The one pod annotation the shim sees: the checkpoint a hibernated session's pod restores from
      # (devcluster/gvisor/restoreext).
      pod_annotations = ["{RESTORE_ANNOTATION}"]
      # The shim finds runsc, its root and the sandbox's flags in this file (runsc_config).
      [{cri_runtime}.containerd.runtimes.{RUNSC_HANDLER}.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = "{dirs.runsc_config}"
  [{cri_runtime}.cni]
    bin_dirs = ["{cni_bin}"]
    conf_dir = "{dirs.cni_conf}"
"""


def runsc_config(dirs: NodeDirs, runsc: Path) -> str:
    """The runsc shim's options: this node's runsc binary and root, and the flags of every sandbox.

    Platform systrap (seccomp traps, no virtualisation): kvm hangs on this machine (nested KVM; see
    docs/gvisor.md). Network "sandbox": gVisor's own netstack, in the pod's network namespace with the address and
    routes CNI gave it, so traffic still leaves through the pod's veth and the node's iptables (kube-router's
    NetworkPolicy rules) see every packet. The kubelet's cgroupfs driver: runsc writes the pod's cgroup
    v1 hierarchies itself (systemd-cgroup off, its default).
    """
    return f"""binary_name = "{runsc}"
root = "{dirs.runsc_root}"
log_path = "{dirs.runsc_logs}/%ID%/shim.log"
log_level = "info"

[runsc_config]
  platform = "{GVISOR_PLATFORM}"
  network = "sandbox"
  debug-log = "{dirs.runsc_logs}/%ID%/"
  # A restored pod is a new pod: its cgroup parent names the new pod's UID, so the checkpoint's annotations
  # never match exactly; "warning" still compares the specs and logs every difference, and restores.
  restore-spec-validation = "warning"
"""


def cni_conflist(dirs: NodeDirs) -> str:
    """A routed point-to-point veth per pod (no bridge: all pod traffic crosses the node's iptables)."""
    conf: dict[str, Any] = {
        "cniVersion": "1.0.0",
        "name": "devcluster",
        "plugins": [
            {
                "type": "ptp",
                "ipMasq": False,
                "mtu": 1500,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": network.NODE_POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(dirs.cni_state),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return json.dumps(conf, indent=2)


def kubelet_config(dirs: NodeDirs, ca: Path, serving: tuple[Path, Path]) -> str:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": network.NODE_IP,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "tlsCertFile": str(serving[0]),
        "tlsPrivateKeyFile": str(serving[1]),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        # This machine has cgroup v1 hierarchies (cgroup2 only mounted beside them): say so explicitly.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": True,
        "cgroupRoot": f"/{CGROUP_PARENT}",
        "failSwapOn": False,
        "enforceNodeAllocatable": [],
        "containerRuntimeEndpoint": f"unix://{dirs.containerd_socket}",
        "clusterDNS": [network.DNS_SERVICE_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(dirs.resolv_conf),
        # Its own pod log directory: every real-node cluster on this machine shares /var/log/pods otherwise,
        # and each kubelet's GC deletes the other clusters' pods' logs (kubectl logs then empty, or late).
        "podLogsDir": str(dirs.root / "pod-logs"),
        "serializeImagePulls": False,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "maxPods": 110,
        "podPidsLimit": 4096,
        "syncFrequency": "10s",
        "nodeStatusUpdateFrequency": "5s",
    }
    return yaml.safe_dump(config, sort_keys=False)


def resolv_conf() -> str:
    # Pods' DNS goes to the cluster DNS address only, never to the host's resolvers.
    return f"nameserver {network.DNS_SERVICE_IP}\nsearch {CLUSTER_DOMAIN}\noptions ndots:5\n"


def kube_proxy_config(kubeconfig: Path, node_name: str) -> str:
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "clusterCIDR": network.POD_CIDR,
        "hostnameOverride": node_name,
        "bindAddress": network.NODE_IP,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "nodePortAddresses": [f"{network.NODE_IP}/32"],
        # Zero leaves the machine-wide conntrack sysctls alone (they are not the namespace's to set).
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
    }
    return yaml.safe_dump(config, sort_keys=False)
