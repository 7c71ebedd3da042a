"""The agent's one API call: a TokenReview of a caller's token, with the agent's own ServiceAccount."""

from __future__ import annotations

import json
import os
import ssl
import urllib.request
from pathlib import Path
from typing import Any

from agentsession_operator.nodeagent.authz import token_review

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class Reviewer:
    """Posts TokenReviews to the API server in the pod's environment (in-cluster)."""

    def __init__(self, server: str | None = None, sa_dir: Path = SA_DIR, timeout: float = 5.0) -> None:
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        self.server = server or f"https://{host}:{port}"
        self.sa_dir = sa_dir
        self.context = ssl.create_default_context(cafile=str(sa_dir / "ca.crt"))
        self.timeout = timeout

    def review(self, token: str, audience: str) -> dict[str, Any]:
        own = (self.sa_dir / "token").read_text().strip()  # re-read: the kubelet rotates it
        request = urllib.request.Request(
            f"{self.server}/apis/authentication.k8s.io/v1/tokenreviews",
            data=json.dumps(token_review(token, audience)).encode(),
            headers={"Authorization": f"Bearer {own}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=self.timeout, context=self.context) as answer:
            result: dict[str, Any] = json.loads(answer.read())
            return result
