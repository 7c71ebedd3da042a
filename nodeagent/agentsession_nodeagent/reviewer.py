"""The agent's API calls, with its own ServiceAccount: a TokenReview of each caller's token, and its
certificate's request at start and renewal (nodeagent/tls.py)."""

from __future__ import annotations

import json
import os
import ssl
import urllib.request
from pathlib import Path
from typing import Any

from agentsession_nodeagent.authz import token_review

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
        return self.call("POST", "/apis/authentication.k8s.io/v1/tokenreviews", token_review(token, audience))

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request to the API server; an answer other than 2xx raises urllib's HTTPError."""
        own = (self.sa_dir / "token").read_text().strip()  # re-read: the kubelet rotates it
        request = urllib.request.Request(
            f"{self.server}{path}",
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {own}", "Content-Type": "application/json"},
            method=method,
        )
        with urllib.request.urlopen(request, timeout=self.timeout, context=self.context) as answer:
            result: dict[str, Any] = json.loads(answer.read())
            return result
