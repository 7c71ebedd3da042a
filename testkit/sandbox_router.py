"""config/components/sandbox-router on the local real node, for the tests and the benchmarks: the router's
objects as shipped (one replica: one node), its verification key Secret, the issuer's ConfigMap, and what
this cluster needs beside them (the API server at the node's address on a port of its own; clients on the
host, as a gateway outside the cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentsession_api import router_access as ra

ROOT = Path(__file__).resolve().parents[1]
COMPONENT = ROOT / "config" / "components" / "sandbox-router"
ISSUER_OBJECTS = ROOT / "config" / "rbac" / "router_issuer.yaml"
NAMESPACE = ra.ISSUER_CONFIGMAP_NAMESPACE
NAME = "agentsession-sandbox-router"
SELECTOR = {"app.kubernetes.io/name": NAME}
KEYS_SECRET = "agentsession-router-verification-keys"


def docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def new_signing_key(directory: Path) -> tuple[Any, Path]:
    """A fresh Ed25519 key as the operator loads it (its ID derived from the key) and its PEM file."""
    from agentsession_operator.issuer.tokens import SigningKey, key_id, private_pem

    private = Ed25519PrivateKey.generate()
    path = directory / "router-signing.pem"
    path.write_bytes(private_pem(private))
    return SigningKey(private, key_id(private.public_key())), path


def objects(key: Any, host_ip: str, node_ip: str) -> list[dict[str, Any]]:
    """Everything to apply in NAMESPACE (each names no namespace of its own but the shipped ones)."""
    from agentsession_operator.issuer.tokens import verification_keys

    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": KEYS_SECRET, "namespace": NAMESPACE},
        "stringData": {"keys.json": verification_keys([key])},
    }
    shipped = [
        doc
        for name in ("service_account", "rbac", "deployment", "service", "network_policy")
        for doc in docs(COMPONENT / f"{name}.yaml")
    ]
    for doc in shipped:
        if doc["kind"] == "Deployment":
            doc["spec"]["replicas"] = 1
    local = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{NAME}-local", "namespace": NAMESPACE},
        "spec": {
            "podSelector": {"matchLabels": SELECTOR},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"ipBlock": {"cidr": f"{host_ip}/32"}}], "ports": [{"port": 8080}]}],
            "egress": [{"to": [{"ipBlock": {"cidr": f"{node_ip}/32"}}]}],
        },
    }
    issuer = [{**doc, "metadata": {**doc["metadata"], "namespace": NAMESPACE}} for doc in docs(ISSUER_OBJECTS)]
    return [*issuer, secret, *shipped, local]


def operator_args(key_file: Path, issuer_port: int, router_url: str) -> list[str]:
    """The operator as the component runs it: the issuer on, the router admitted once it refused a call
    without a credential (at `router_url`)."""
    return [
        f"--router-token-key-file={key_file}",
        f"--router-issuer-port={issuer_port}",
        f"--sandbox-router={NAMESPACE}/app.kubernetes.io/name={NAME}",
        f"--sandbox-router-url={router_url}",
    ]
