"""Every pinned version of the local control plane, in one place."""

from __future__ import annotations

KUBERNETES = "v1.37.2"
# The staging modules (k8s.io/api, k8s.io/client-go, ...) are released as v0.<minor>.<patch>.
KUBERNETES_STAGING = "v0." + KUBERNETES.removeprefix("v1.")
ETCD = "v3.6.16"
KWOK = "v0.8.0"
# v1.0.3 is the newest v1.0.x the Go module proxy serves here (v1.0.0-2 and v1.0.4+ answer 403).
AGENT_SANDBOX = "v1.0.3"

# The local image registry a real node pulls from (github.com/distribution/distribution/v3).
DISTRIBUTION = "v3.1.2"
# Root filesystems of the locally built images come from Debian packages (mmdebstrap), from the mirror
# this machine's apt is configured with (devcluster.images.debian_mirror).
# Stands in for python:3.11-slim-bookworm, the base operator/Dockerfile names.
DEBIAN_BASE_SUITE = "bookworm"
# Upstream's python runtime image is built FROM python:3.14-slim; its pinned requirements (numpy 2.5,
# scipy 1.18) need Python >= 3.12, which bookworm lacks: trixie's Python 3.13 has wheels for all of them.
DEBIAN_RUNTIME_SUITE = "trixie"
# registry.k8s.io/pause tags: containerd 2.4's CRI default sandbox image, and the one our manifests name.
PAUSE_TAGS = ("3.10.2", "3.10")

# The real node (NODE=real): the kubelet and kube-proxy come from KUBERNETES above.
CONTAINERD = "v2.4.2"
CNI_PLUGINS = "v1.10.0"
# The only kube-router the Go proxy serves here; run as a NetworkPolicy controller only (iptables + ipset:
# this kernel has no nftables queue). Its vulnerable dependencies are raised in its tools module.
KUBE_ROUTER = "v2.1.0"
# gVisor (runsc + containerd-shim-runsc-v1), the real node's second runtime (RuntimeClass `gvisor`). gVisor
# tags no releases on its module: the buildable `go` branch, as `go list -m gvisor.dev/gvisor@go` names it.
GVISOR = "v0.0.0-20260527191743-a81fd9dd382e"

# The Helm chart (charts/agentsession): helm template / install in tests. Not part of any cluster.
HELM = "v3.22.0"
# krew, to install the kubectl plugin from its release manifest in tests (dist/krew). Not part of any cluster.
KREW = "v0.4.3"
