"""A real, local Kubernetes control plane for development, demos and end-to-end tests.

Built from registry packages (Go modules, PyPI) because these machines have no container engine:
etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok (the kubelet of fake nodes),
the agent-sandbox controller and a pod runner that starts the real sandbox runtime for each pod.
"""
