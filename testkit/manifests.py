"""Manifests the end-to-end tests and the benchmarks share: agent-sandbox templates, pools and claims,
pods and AgentSessions."""

from __future__ import annotations

from typing import Any

from agentsession_api.names import POD_IDENTITY_AUDIENCE, POD_IDENTITY_DIR, POD_IDENTITY_VOLUME

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
PYTHON_RUNTIME_IMAGE = "registry.k8s.io/agent-sandbox/python-runtime-sandbox:v1.0.3"
EXT = "extensions.agents.x-k8s.io/v1beta1"
GVISOR = "gvisor"
"""The RuntimeClass the real node has (devcluster.realnode.configs.GVISOR_RUNTIME_CLASS; GKE Sandbox's name)."""


def pod_identity_volume(expiration_seconds: int = 3600) -> dict[str, Any]:
    """The volume that gives a sandbox pod its identity token (`agentsession_api.POD_IDENTITY_VOLUME`):
    what the clients check before they send the session anything."""
    token = {"audience": POD_IDENTITY_AUDIENCE, "expirationSeconds": expiration_seconds, "path": "token"}
    return {"name": POD_IDENTITY_VOLUME, "projected": {"sources": [{"serviceAccountToken": token}]}}


POD_IDENTITY_MOUNT = {"name": POD_IDENTITY_VOLUME, "mountPath": POD_IDENTITY_DIR, "readOnly": True}


def template(
    name: str,
    image: str = PAUSE_IMAGE,
    *,
    readiness_path: str | None = "/",
    env_policy: str | None = None,
    vct_policy: str | None = None,
    pod_security_context: dict[str, Any] | None = None,
    volume_mounts: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    runtime_class: str | None = None,
    pod_identity: bool = True,
) -> dict[str, Any]:
    """`pod_identity`: a runtime image's pods get the identity volume clients ask for (the pause image serves
    no client)."""
    container: dict[str, Any] = {"name": "sandbox", "image": image}
    if pod_identity and image != PAUSE_IMAGE:
        volume_mounts = [*(volume_mounts or []), POD_IDENTITY_MOUNT]
        volumes = [*(volumes or []), pod_identity_volume()]
    if image != PAUSE_IMAGE:
        container["ports"] = [{"containerPort": 8888, "name": "http"}]
        if readiness_path:
            container["readinessProbe"] = {
                "httpGet": {"path": readiness_path, "port": 8888},
                "periodSeconds": 2,
                "failureThreshold": 1,
            }
    if volume_mounts:
        container["volumeMounts"] = volume_mounts
    pod_spec: dict[str, Any] = {"containers": [container], "dnsPolicy": "ClusterFirst"}
    if pod_security_context:
        pod_spec["securityContext"] = pod_security_context
    if volumes:
        pod_spec["volumes"] = volumes
    if runtime_class:
        pod_spec["runtimeClassName"] = runtime_class
    spec: dict[str, Any] = {
        "podTemplate": {"metadata": {"labels": {"app": "e2e-sandbox"}}, "spec": pod_spec},
        # Deliberate: no NetworkPolicy from the template (tests reach pods directly).
        "networkPolicyManagement": "Unmanaged",
    }
    if env_policy:
        spec["envVarsInjectionPolicy"] = env_policy
    if vct_policy:
        spec["volumeClaimTemplatesPolicy"] = vct_policy
    return {"apiVersion": EXT, "kind": "SandboxTemplate", "metadata": {"name": name}, "spec": spec}


def warm_pool(name: str, template_name: str, replicas: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": EXT,
        "kind": "SandboxWarmPool",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template_name}},
    }


def claim(name: str, pool: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": EXT,
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": pool}, **spec},
    }


def pod(name: str, image: str = PAUSE_IMAGE, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": image}], **spec},
    }


def session(
    name: str, pool: str | None = None, meta_labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {"name": name},
        "spec": dict(spec),
    }
    if pool:
        body["spec"]["warmPoolRef"] = {"name": pool}
    if meta_labels:
        body["metadata"]["labels"] = meta_labels
    return body
