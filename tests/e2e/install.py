"""Install config/'s RBAC on the local control plane and hand out kubeconfigs that carry real tokens.

`service_account_kubeconfig` is what the operator runs with in an end-to-end test: the ServiceAccount
and exactly the (Cluster)Roles that `kubectl apply -k config/` grants it, so a missing or an excess
permission shows up as a failing test rather than in someone's cluster. `client_kubeconfig` does the
same for an application that uses langchain_k8s_client, with config/client-rbac/.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from devcluster import kubeconfig

if TYPE_CHECKING:
    from devcluster.cluster import Cluster
    from tests.e2e.conftest import Kube

ROOT = Path(__file__).parents[2]
CONFIG = ROOT / "config"
CLIENT_RBAC = CONFIG / "client-rbac"

OPERATOR_NAMESPACE = "agentsession-system"
OPERATOR_SERVICE_ACCOUNT = "agentsession-operator"
CLIENT_SERVICE_ACCOUNT = "agent-app"
TOKEN_DURATION = "2h"

# What service_account_kubeconfig installs from config/: the identity, its permissions and the pins on
# what those permissions may change (config/admission/), not the workload (Deployment, Service) nor the
# CRDs (the tests apply those from crds/ themselves).
RBAC_KINDS = frozenset(
    {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
)


def render(kube: Kube, directory: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize DIR`: the objects `kubectl apply -k DIR` would apply."""
    return [doc for doc in yaml.safe_load_all(kube.run("kustomize", str(directory)).stdout) if doc]


def operator_rbac(kube: Kube) -> list[dict[str, Any]]:
    """config/'s Namespace, ServiceAccount, ClusterRole(Binding) and Role(Binding), in apply order."""
    docs = [doc for doc in render(kube, CONFIG) if doc["kind"] in RBAC_KINDS]
    # The Namespace first, so that one apply can create what lives in it.
    return sorted(docs, key=lambda doc: doc["kind"] != "Namespace")


WEBHOOK_CONFIGURATION = CONFIG / "webhook" / "validating_webhook_configuration.yaml"


def dev_webhook_configuration() -> dict[str, Any]:
    """config/'s ValidatingWebhookConfiguration as the host-process operator of the e2e tests uses it.

    Two changes, both for tests that create sessions while that operator is killed or stopped (the
    reconcile-time backstop, failover, faults): failurePolicy Ignore, and a URL placeholder the operator
    replaces with its own (it listens on 127.0.0.1, not behind the Service). The installed operator is
    tested with config/'s own (Fail, the Service): tests/e2e/test_install_image.py.
    """
    doc = yaml.safe_load(WEBHOOK_CONFIGURATION.read_text())
    for hook in doc["webhooks"]:
        hook["failurePolicy"] = "Ignore"
        hook["clientConfig"] = {"url": "https://127.0.0.1:1/policy"}
    return dict(doc)


def ensure_dev_webhook_configuration(cluster: Cluster) -> None:
    """Create it unless one exists (never overwrite: the running operator has patched in its URL and CA)."""
    proc = cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(dev_webhook_configuration()), check=False)
    if proc.returncode != 0 and "AlreadyExists" not in proc.stderr:
        raise AssertionError(f"creating the webhook configuration: {proc.stderr}")


def _token(kube: Kube, service_account: str, namespace: str) -> str:
    proc = kube.run("create", "token", service_account, "-n", namespace, f"--duration={TOKEN_DURATION}")
    token = proc.stdout.strip()
    if not token:
        raise AssertionError(f"kubectl create token {service_account} -n {namespace} printed nothing")
    return token


def _write(cluster: Cluster, path: Path, token: str, user: str, namespace: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(kubeconfig.write_token(path, cluster.server, cluster.paths.pki / "ca.crt", token, user, namespace))


def service_account_kubeconfig(kube: Kube, cluster: Cluster, tmp_dir: Path) -> str:
    """Apply config/'s RBAC objects and return the path of a kubeconfig with the operator's token.

    The operator started with it has exactly the permissions `kubectl apply -k config/` gives the
    Deployment's ServiceAccount. agent-sandbox-system must exist (the local control plane makes it).
    """
    kube.apply(*operator_rbac(kube))
    token = _token(kube, OPERATOR_SERVICE_ACCOUNT, OPERATOR_NAMESPACE)
    user = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_SERVICE_ACCOUNT}"
    return _write(cluster, Path(tmp_dir) / "operator.kubeconfig", token, user, OPERATOR_NAMESPACE)


def client_kubeconfig(
    kube: Kube, cluster: Cluster, namespace: str, tmp_dir: Path, *, port_forward: bool = False
) -> str:
    """Install config/client-rbac/ into `namespace` and return a kubeconfig with its ServiceAccount's token.

    It goes in the way a user installs it: an overlay whose only change is the namespace. With
    `port_forward`, the overlay also takes the optional config/client-rbac/portforward/.
    """
    overlay = Path(tmp_dir) / f"client-rbac-{namespace}"
    sources = [CLIENT_RBAC, CLIENT_RBAC / "portforward"] if port_forward else [CLIENT_RBAC]
    overlay.mkdir(parents=True, exist_ok=True)
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": namespace,
                # kustomize takes relative paths only (a directory outside the root is fine).
                "resources": [os.path.relpath(source, overlay) for source in sources],
            }
        )
    )
    kube.run("apply", "-k", str(overlay))
    token = _token(kube, CLIENT_SERVICE_ACCOUNT, namespace)
    user = f"system:serviceaccount:{namespace}:{CLIENT_SERVICE_ACCOUNT}"
    return _write(cluster, Path(tmp_dir) / f"client-{namespace}.kubeconfig", token, user, namespace)
