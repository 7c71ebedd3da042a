"""Kubeconfig files for the local control plane's clients."""

from __future__ import annotations

from pathlib import Path

import yaml

from devcluster.pki import KeyPair


def write(path: Path, server: str, ca: Path, client: KeyPair, user: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "devcluster", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(client.cert), "client-key": str(client.key)}}],
        "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": user}}],
        "current-context": "devcluster",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def write_token(path: Path, server: str, ca: Path, token: str, user: str, namespace: str = "default") -> Path:
    """A kubeconfig that authenticates with a bearer token (a ServiceAccount's, for RBAC tests)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "devcluster", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": "devcluster", "context": {"cluster": "devcluster", "user": user, "namespace": namespace}}
        ],
        "current-context": "devcluster",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
