"""The operator's command line: flags, logging, preflight, metrics, then kopf (standalone: no peering).

Several replicas may run: all watch and serve the webhook, and only the holder of a coordination.k8s.io
Lease reconciles (kube/election/leader.py; kopf's priority-based peering would freeze equal replicas); with
--shards, each replica caches and reconciles the namespaces of the shards whose Lease it holds
(kube/election/shard_elector.py).

`python -m agentsession_operator` and the `agentsession-operator` script run :func:`main`.
"""

from __future__ import annotations

import asyncio
import dataclasses

import kopf
import structlog

from agentsession_operator.admission import handler as admission
from agentsession_operator.admission import server as webhook
from agentsession_operator.handlers import certificates
from agentsession_operator.handlers.state import OperatorState
from agentsession_operator.infra import logs, metrics
from agentsession_operator.issuer import router_check
from agentsession_operator.kube import preflight
from agentsession_operator.kube.client import Kube
from agentsession_operator.settings import OperatorSettings


def parse_args(argv: list[str] | None = None) -> OperatorSettings:
    """The flags (settings.py declares each one), as one frozen object; a bad one exits as argparse does."""
    return OperatorSettings.from_argv(argv, description=__doc__)


async def _preflight() -> None:
    kube = await Kube.connect()
    try:
        await preflight.check_agent_sandbox(kube)
        await preflight.check_own_crds(kube)
    finally:
        await kube.close()


def warn_unauthenticated_webhook() -> None:
    """Loudly, once at start: without --webhook-client-ca any address the NetworkPolicy admits may call the
    webhook and read a tenant's policy details from its refusals (docs/security.md, issue 28 item 12)."""
    structlog.get_logger("agentsession.webhook").warning(
        "webhook client authentication is OFF: any caller the operator's NetworkPolicy admits gets answers",
        fix="give the API server a client certificate for admission webhooks (AdmissionConfiguration "
        "kubeConfigFile) and start the operator with --webhook-client-ca (chart: webhook.clientAuth)",
    )


def check_router(settings: OperatorSettings) -> OperatorSettings:
    """The router is admitted only once it refused a call without a credential (--sandbox-router-url); the
    deprecated unchecked --sandbox-router-authorizes is still taken, loudly. Otherwise the settings come back
    without --sandbox-router: an admitted router that does not authorize is a way into every sandbox (issue 28
    item 3)."""
    if not settings.sandbox_router:
        return settings
    log = structlog.get_logger("agentsession.network")
    if settings.sandbox_router_url:
        verdict = router_check.check(settings.sandbox_router_url)
        if verdict.admitted:
            log.info("sandbox router admitted", router=settings.sandbox_router, why=verdict.reason)
            return settings
        log.error("sandbox router NOT admitted", router=settings.sandbox_router, why=verdict.reason)
        return dataclasses.replace(settings, sandbox_router=None)
    if settings.sandbox_router_authorizes:
        log.warning(
            "the sandbox router is admitted unchecked (--sandbox-router-authorizes is deprecated)",
            router=settings.sandbox_router,
            fix="give --sandbox-router-url: the operator then checks the router refuses a call without a credential",
        )
        return settings
    log.warning(
        "the sandbox router is admitted to every sandbox: any pod that reaches it reaches every session",
        router=settings.sandbox_router,
        fix="run the router with --authz-mode=scoped-token (config/components/sandbox-router) and give the operator "
        "--sandbox-router-url, or leave --sandbox-router unset",
    )
    return settings


def main(argv: list[str] | None = None) -> None:
    settings = parse_args(argv)
    logs.configure(settings.log_level, json=settings.log_format == "json")
    settings = check_router(settings)
    asyncio.run(_preflight())  # a clear message, not a stack trace, against a too-old agent-sandbox or CRD
    if settings.metrics_port:
        if not settings.leader_elect:
            metrics.LEADER.set(1)  # no election: this process always reconciles
        metrics.serve(settings.metrics_port, settings.bind)
    registry = kopf.get_default_registry()
    import agentsession_operator.handlers  # noqa: F401 - registers the startup and watch handlers

    if settings.node_agent:
        certificates.register(registry)  # the agents' certificate requests: signed here
    config = settings.webhook_config()
    if config.enabled:
        try:
            webhook.ensure_port_free(config)
        except OSError as err:
            raise SystemExit(f"agentsession-operator: webhook port {config.bind}:{config.port}: {err}") from err
        admission.register(registry)  # handlers.startup then configures the server (settings.admission)
        if not config.client_ca:
            warn_unauthenticated_webhook()

    asyncio.run(
        kopf.operator(
            registry=registry,
            memo=kopf.Memo(
                state=OperatorState(
                    settings=settings,
                    webhook=config,
                    election=settings.election(),
                    issuer=settings.issuer_config(),
                )
            ),
            standalone=True,
            clusterwide=not settings.namespace,
            namespaces=settings.namespace,
            liveness_endpoint=settings.liveness_endpoint(),
        )
    )
