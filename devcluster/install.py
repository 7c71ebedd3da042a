"""Install the operator on the real node exactly as users do: its image, then `kubectl apply -k config/`.

`make install` (on a running real-node cluster) builds the operator's image from operator/Dockerfile
(cached by its sources), pushes it into the cluster's registry under the name config/ uses, applies
config/ and waits for the Deployment to be available. `make uninstall` deletes what config/ created
(the webhook configuration is part of it; the extra delete covers one left by a host-process operator).
"""

from __future__ import annotations

import json
import sys
from typing import IO

from devcluster.cluster import REPO_ROOT, Cluster, ClusterError

CONFIG = REPO_ROOT / "config"
NAMESPACE = "agentsession-system"
DEPLOYMENT = "agentsession-operator"
# The admission webhook's configuration, named after the API group (shipped in config/webhook/).
WEBHOOK_CONFIGURATION = "validatingwebhookconfiguration/agentsession.dev"


def _require_real_node(cluster: Cluster) -> None:
    if not cluster.is_running():
        raise ClusterError("no local cluster is running: start one with `make cluster-up NODE=real`")
    if cluster.node != "real":
        raise ClusterError(
            "the operator runs as a Pod, which needs the real node: `make cluster-down && make cluster-up NODE=real`"
        )


def install(cluster: Cluster, out: IO[str] = sys.stderr, timeout: str = "180s") -> None:
    from devcluster import images  # builds with buildah: only needed here and on the real node

    _require_real_node(cluster)
    images.build_image(images.OPERATOR, out)
    images.push(images.OPERATOR, cluster.registry_address, images.OPERATOR.dir() / "push.log")
    # A host-process operator (make operator, the e2e tests) leaves a configuration of the same name that
    # points at its URL; config/'s names the Service, and one webhook cannot have both.
    urls = cluster.kubectl("get", WEBHOOK_CONFIGURATION, "-o", "jsonpath={.webhooks[*].clientConfig.url}", check=False)
    if urls.returncode == 0 and urls.stdout.strip():
        cluster.kubectl("delete", WEBHOOK_CONFIGURATION)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(CONFIG))
    narrow_webhook_ingress(cluster)
    require_api_server_certificate(cluster)
    # The image tag stays the same while its content changes: restart to run the image just pushed.
    cluster.kubectl("-n", NAMESPACE, "rollout", "restart", f"deployment/{DEPLOYMENT}")
    cluster.kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{DEPLOYMENT}", f"--timeout={timeout}")
    print(f"[devcluster] operator installed from {images.OPERATOR.refs[0]} (config/)", file=out, flush=True)


def narrow_webhook_ingress(cluster: Cluster) -> None:
    """config/'s NetworkPolicy admits the webhook port from every address until told the API server's, as
    a user does for their control plane. Here the API server runs on the host and reaches the webhook's
    Service through the node's veth: its source is the host's end of that link."""
    from devcluster.realnode import network

    ops = [{"op": "replace", "path": "/spec/ingress/0/from", "value": [{"ipBlock": {"cidr": f"{network.HOST_IP}/32"}}]}]
    cluster.kubectl("-n", NAMESPACE, "patch", "networkpolicy", DEPLOYMENT, "--type=json", "-p", json.dumps(ops))


WEBHOOK_CLIENT_CA_CONFIGMAP = "apiserver-webhook-client-ca"
WEBHOOK_CLIENT_CA_DIR = "/etc/agentsession/webhook-client-ca"


def require_api_server_certificate(cluster: Cluster) -> None:
    """Only the API server may call the webhook: this cluster's API server presents the client certificate
    of pki/webhook-client-ca (its AdmissionConfiguration), so the operator requires it, as a user turns it
    on for their control plane (the chart's webhook.clientAuth does the same)."""
    from devcluster.cluster import WEBHOOK_CLIENT_CA, WEBHOOK_CLIENT_NAME

    ca = (cluster.paths.pki / f"{WEBHOOK_CLIENT_CA}.crt").read_text()
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": WEBHOOK_CLIENT_CA_CONFIGMAP, "namespace": NAMESPACE},
        "data": {"ca.crt": ca},
    }
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(configmap))
    deployment = json.loads(cluster.kubectl("-n", NAMESPACE, "get", "deployment", DEPLOYMENT, "-o", "json").stdout)
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    wanted = [f"--webhook-client-ca={WEBHOOK_CLIENT_CA_DIR}/ca.crt", f"--webhook-client-name={WEBHOOK_CLIENT_NAME}"]
    args = [a for a in container.get("args") or [] if not a.startswith("--webhook-client-")] + wanted
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": container["name"],
                            "args": args,
                            "volumeMounts": [
                                {"name": "webhook-client-ca", "mountPath": WEBHOOK_CLIENT_CA_DIR, "readOnly": True}
                            ],
                        }
                    ],
                    "volumes": [{"name": "webhook-client-ca", "configMap": {"name": WEBHOOK_CLIENT_CA_CONFIGMAP}}],
                }
            }
        }
    }
    cluster.kubectl("-n", NAMESPACE, "patch", "deployment", DEPLOYMENT, "--type=strategic", "-p", json.dumps(patch))


def uninstall(cluster: Cluster, out: IO[str] = sys.stderr) -> None:
    _require_real_node(cluster)
    cluster.kubectl("delete", "-k", str(CONFIG), "--ignore-not-found", "--wait=true", "--timeout=120s")
    cluster.kubectl("delete", WEBHOOK_CONFIGURATION, "--ignore-not-found")
    cluster.kubectl("-n", NAMESPACE, "delete", "configmap", WEBHOOK_CLIENT_CA_CONFIGMAP, "--ignore-not-found")
    print("[devcluster] operator uninstalled", file=out, flush=True)
