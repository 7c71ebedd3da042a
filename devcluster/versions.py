"""Every pinned version of the local control plane, in one place."""

from __future__ import annotations

KUBERNETES = "v1.37.2"
# The staging modules (k8s.io/api, k8s.io/client-go, ...) are released as v0.<minor>.<patch>.
KUBERNETES_STAGING = "v0." + KUBERNETES.removeprefix("v1.")
ETCD = "v3.6.16"
KWOK = "v0.8.0"
# v1.0.3 is the newest v1.0.x the Go module proxy serves here (v1.0.0-2 and v1.0.4+ answer 403).
AGENT_SANDBOX = "v1.0.3"

# The real node (NODE=real): the kubelet and kube-proxy come from KUBERNETES above.
CONTAINERD = "v2.4.2"
CNI_PLUGINS = "v1.10.0"
# The only kube-router the Go proxy serves here; run as a NetworkPolicy controller only (iptables + ipset:
# this kernel has no nftables queue). Its vulnerable dependencies are raised in its tools module.
KUBE_ROUTER = "v2.1.0"

# The Helm chart (charts/agentsession): helm template / install in tests. Not part of any cluster.
HELM = "v3.22.0"
