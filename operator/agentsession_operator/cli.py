"""The operator's command line: flags, logging, preflight, metrics, then kopf (standalone: no peering).

Several replicas may run: all watch and serve the webhook, and only the holder of a coordination.k8s.io
Lease reconciles (kube/election/leader.py; kopf's priority-based peering would freeze equal replicas); with
--shards, each replica caches and reconciles the namespaces of the shards whose Lease it holds
(kube/election/shard_elector.py).

`python -m agentsession_operator` and the `agentsession-operator` script run :func:`main`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

import kopf
import structlog
from kubernetes_asyncio import config as kube_config

import agentsession_api
import agentsession_operator
from agentsession_api import router_access as ra
from agentsession_api.durations import parse_duration
from agentsession_operator.admission import handler as admission
from agentsession_operator.admission import server as webhook
from agentsession_operator.decisions import network, quota
from agentsession_operator.handlers import certificates
from agentsession_operator.handlers.state import Election, OperatorState
from agentsession_operator.infra import logs, metrics
from agentsession_operator.issuer import router_check
from agentsession_operator.issuer import server as issuer_server
from agentsession_operator.issuer.server import IssuerConfig
from agentsession_operator.kube import preflight
from agentsession_operator.kube.agent_certificates import AGENT_CA_SECRET
from agentsession_operator.kube.client import Kube
from agentsession_operator.kube.election import MAX_SHARDS, Timing, default_identity
from agentsession_operator.kube.node_agent import TOKEN_PATH


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agentsession-operator", description=__doc__)
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {agentsession_operator.__version__} (agentsession-api {agentsession_api.__version__})",
    )
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=None,
        help="watch only this namespace (repeatable; default: all namespaces)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=int(os.environ.get("METRICS_PORT", "8080")),
        help="Prometheus metrics port (0 disables)",
    )
    parser.add_argument(
        "--health-port",
        type=int,
        default=int(os.environ.get("HEALTH_PORT", "8081")),
        help="liveness endpoint port, served at /healthz (0 disables)",
    )
    parser.add_argument(
        "--bind",
        default=os.environ.get("BIND_ADDRESS", "127.0.0.1"),
        help="address for the webhook, metrics and health endpoints (default loopback; the Deployment sets 0.0.0.0)",
    )
    parser.add_argument(
        "--resync-period",
        type=float,
        default=float(os.environ.get("RESYNC_PERIOD", "300")),
        help="seconds between relists that drop cached objects deleted while a watch was down",
    )
    parser.add_argument("--log-format", choices=["json", "console"], default=os.environ.get("LOG_FORMAT", "json"))
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))
    parser.add_argument(
        "--node-agent",
        default=os.environ.get("NODE_AGENT") or None,
        help="NAMESPACE/key=value: the node agent's pods (config/components/nodeagent), which checkpoint a "
        "gVisor sandbox for idleAction Hibernate; default: none (Hibernate suspends as Suspend)",
    )
    parser.add_argument(
        "--node-agent-token",
        default=os.environ.get("NODE_AGENT_TOKEN") or str(TOKEN_PATH),
        help="the operator's token for the node agent, bound to its audience (default: the projected token "
        "config/components/nodeagent mounts; an operator outside the cluster names a file)",
    )
    parser.add_argument(
        "--node-agent-account",
        default=os.environ.get("NODE_AGENT_ACCOUNT") or _own_account(),
        help="NAMESPACE/SERVICEACCOUNT: the operator's own account, for which it mints each node's agent a "
        "token of that node's audience (TokenRequest; default in a pod: $POD_NAMESPACE/$POD_SERVICE_ACCOUNT); "
        "empty: --node-agent-token goes to every agent",
    )
    parser.add_argument(
        "--node-agent-ca-secret",
        default=os.environ.get("NODE_AGENT_CA_SECRET") or "",
        help="NAMESPACE/NAME: the Secret of the node agents' CA, made by the operator, which signs each agent's "
        "certificate for its node and verifies it before sending a token (default: "
        f"<own namespace>/{AGENT_CA_SECRET}, shipped empty with config/components/nodeagent)",
    )
    parser.add_argument(
        "--max-checkpoint-size",
        type=int,
        default=int(os.environ.get("MAX_CHECKPOINT_BYTES") or 512 * 1024 * 1024),
        help="bytes: a larger checkpoint is deleted and the session suspends as Suspend (default 512 MiB)",
    )
    parser.add_argument(
        "--max-sessions-per-namespace",
        type=_non_negative,
        default=int(os.environ.get("MAX_SESSIONS_PER_NAMESPACE") or quota.DEFAULT_MAX_SESSIONS_PER_NAMESPACE),
        help="unfinished AgentSessions a namespace may hold when no AgentSessionPolicy sets "
        "cleanup.maxSessionsPerNamespace there (default %(default)s; 0: no cap): one tenant cannot grow the "
        "operator for everyone",
    )
    parser.add_argument(
        "--expiry-warning",
        default=os.environ.get("EXPIRY_WARNING", "10m"),
        help="post an ExpiringSoon Warning Event this long before a session's TTL ends (Go duration; 0: never)",
    )
    lead = parser.add_argument_group("leader election (run several replicas: one reconciles, the others stand by)")
    lead.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=os.environ.get("LEADER_ELECT", "true").lower() not in ("0", "false", "no"),
        help="reconcile only while holding the Lease (default: on; off: this process always reconciles)",
    )
    lead.add_argument(
        "--lease-namespace",
        default=os.environ.get("LEASE_NAMESPACE") or os.environ.get("POD_NAMESPACE") or None,
        help="namespace of the Lease (default: $POD_NAMESPACE, else the service account's or kubeconfig's namespace)",
    )
    lead.add_argument("--lease-name", default=os.environ.get("LEASE_NAME", "agentsession-operator"))
    lead.add_argument("--lease-duration", type=float, default=10.0, help="seconds a standby waits on a silent leader")
    lead.add_argument("--renew-deadline", type=float, default=7.0, help="seconds the leader acts after a renewal")
    lead.add_argument("--retry-period", type=float, default=2.0, help="seconds between lease rounds")
    lead.add_argument(
        "--shards",
        type=int,
        default=int(os.environ.get("SHARDS", "1")),
        help="split the namespaces into this many shards, one Lease each, shared out among the replicas "
        "(1: one Lease, one replica reconciles everything; the same on every replica; docs/operations.md)",
    )
    net = parser.add_argument_group("sandbox network (each session's own NetworkPolicy)")
    net.add_argument(
        "--cluster-cidr",
        action="append",
        default=_list_env("CLUSTER_CIDRS"),
        help="the cluster's pod or Service range, cut out of every CIDR a policy's egress allows unless "
        "that CIDR lies inside it (repeat; env CLUSTER_CIDRS, comma-separated); added to the private "
        "ranges, which are always cut out the same way",
    )
    net.add_argument(
        "--sandbox-router",
        default=os.environ.get("SANDBOX_ROUTER") or None,
        help="NAMESPACE/key=value[,key=value]: the sandbox router's pods, admitted to every sandbox "
        "(e.g. agent-sandbox-system/app=sandbox-router); default: none. The router forwards to whatever "
        "session a caller names: admit it only once it authorizes every call for its session",
    )
    net.add_argument(
        "--sandbox-router-url",
        default=os.environ.get("SANDBOX_ROUTER_URL", ""),
        help="the --sandbox-router's proxy URL (e.g. http://agentsession-sandbox-router.agentsession-system:8080): "
        "at start the operator sends it a call without a credential and admits the router only if it answers 401",
    )
    net.add_argument(
        "--sandbox-router-authorizes",
        action="store_true",
        default=os.environ.get("SANDBOX_ROUTER_AUTHORIZES", "").lower() in ("1", "true", "yes"),
        help="deprecated (unchecked; give --sandbox-router-url and the operator checks): say that the "
        "--sandbox-router authorizes every call for its session",
    )
    net.add_argument(
        "--client-cidr",
        action="append",
        default=_list_env("CLIENT_CIDRS"),
        help="a CIDR also admitted to every sandbox, e.g. a gateway outside the cluster (repeat; env CLIENT_CIDRS)",
    )
    issuer = parser.add_argument_group("router credentials (the operator issues per-session tokens for the router)")
    issuer.add_argument(
        "--router-token-key-file",
        default=os.environ.get("ROUTER_TOKEN_KEY_FILE") or None,
        help="PEM Ed25519 private key that signs the sandbox router's scoped tokens (v2); setting it turns the "
        "issuer on (the router holds the public half: python -m agentsession_operator.issuer.keys)",
    )
    issuer.add_argument(
        "--router-token-key-id",
        default="",
        help="the key's ID in the router's key set (default: derived from the public key)",
    )
    issuer.add_argument(
        "--router-issuer-port", type=int, default=issuer_server.DEFAULT_PORT, help="HTTPS port of the issuer, on --bind"
    )
    issuer.add_argument(
        "--router-issuer-url",
        default=os.environ.get("ROUTER_ISSUER_URL", ""),
        help="the URL clients dial, as published (in a cluster: the operator Service's, e.g. "
        "https://agentsession-operator.agentsession-system.svc:9444; default: https://<--bind>:<port>)",
    )
    issuer.add_argument(
        "--router-token-ttl",
        type=int,
        default=issuer_server.DEFAULT_TTL,
        help=f"seconds a router token stays valid (at least {issuer_server.MIN_TTL}: clients renew a token "
        f"{ra.RENEW_MARGIN} s before it expires)",
    )
    issuer.add_argument(
        "--router-issuer-configmap",
        default=f"{ra.ISSUER_CONFIGMAP_NAMESPACE}/{ra.ISSUER_CONFIGMAP}",
        help="NAMESPACE/NAME of the ConfigMap where the issuer's URL and CA are published (shipped empty)",
    )
    hook = parser.add_argument_group("admission webhook (AgentSessionPolicy enforced on CREATE/UPDATE)")
    hook.add_argument(
        "--webhook-port",
        type=int,
        default=int(os.environ.get("WEBHOOK_PORT", str(webhook.DEFAULT_PORT))),
        help="HTTPS port of the validating webhook, listening on --bind (0 disables the webhook)",
    )
    hook.add_argument(
        "--webhook-host",
        default=os.environ.get("WEBHOOK_HOST") or None,
        help="host in the webhook URL the API server calls (default: the --bind address; 0.0.0.0 gives 127.0.0.1)",
    )
    hook.add_argument(
        "--webhook-service",
        default=os.environ.get("WEBHOOK_SERVICE") or None,
        metavar="NAMESPACE/NAME[:PORT]",
        help="reach the webhook through this Service (port default 443) instead of a URL (in-cluster)",
    )
    hook.add_argument("--webhook-cert", default=None, help="serving certificate (PEM); default: a generated one")
    hook.add_argument("--webhook-key", default=None, help="private key of --webhook-cert (PEM)")
    hook.add_argument("--webhook-ca", default=None, help="CA bundle for the API server (default: --webhook-cert)")
    hook.add_argument(
        "--webhook-cert-secret",
        default=os.environ.get("WEBHOOK_CERT_SECRET") or None,
        metavar="NAMESPACE/NAME",
        help="one certificate for every replica and restart, from this Secret (tls.crt, tls.key, ca.crt)",
    )
    hook.add_argument(
        "--webhook-cert-generate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fill the --webhook-cert-secret Secret when it has no usable certificate (off: it is provided, "
        "e.g. by cert-manager, and waited for)",
    )
    hook.add_argument(
        "--webhook-configuration",
        default=os.environ.get("WEBHOOK_CONFIGURATION", webhook.CONFIGURATION),
        help="the shipped ValidatingWebhookConfiguration whose clientConfig and caBundle this operator patches "
        "(empty: leave it alone)",
    )
    hook.add_argument(
        "--webhook-client-ca",
        default=os.environ.get("WEBHOOK_CLIENT_CA") or None,
        metavar="PEM_FILE",
        help="require a client certificate signed by this CA: the one the API server presents to webhooks "
        "(its AdmissionConfiguration kubeConfigFile); callers without one are refused in the TLS handshake",
    )
    hook.add_argument(
        "--webhook-client-name",
        action="append",
        default=_list_env("WEBHOOK_CLIENT_NAMES"),
        help="with --webhook-client-ca: the client certificate's common name (or a DNS name) must be this one "
        "(repeat; env WEBHOOK_CLIENT_NAMES); default: any certificate the CA signed",
    )
    args = parser.parse_args(argv)
    if args.webhook_client_name and not args.webhook_client_ca:
        parser.error("--webhook-client-name needs --webhook-client-ca")
    if bool(args.webhook_cert) != bool(args.webhook_key):
        parser.error("--webhook-cert and --webhook-key go together")
    if not 1 <= args.shards <= MAX_SHARDS:
        parser.error(f"--shards: expected 1 to {MAX_SHARDS}, got {args.shards}")
    if args.shards > 1 and not args.leader_elect:
        parser.error("--shards above 1 needs leader election (a Lease per shard): drop --no-leader-elect")
    try:
        Timing(args.lease_duration, args.renew_deadline, args.retry_period)
    except ValueError as err:
        parser.error(str(err))
    try:
        network_settings(args)
    except ValueError as err:
        parser.error(str(err))
    if args.expiry_warning != "0":
        try:
            parse_duration(args.expiry_warning)
        except ValueError as err:
            parser.error(f"--expiry-warning: {err}")
    if args.webhook_service:
        try:
            webhook.parse_service(args.webhook_service)
        except ValueError as err:
            parser.error(f"--webhook-service: {err}")
    if args.webhook_cert_secret:
        namespace, _, name = args.webhook_cert_secret.partition("/")
        if not namespace or not name or "/" in name:
            parser.error(f"--webhook-cert-secret: expected namespace/name, got {args.webhook_cert_secret!r}")
        if args.webhook_cert:
            parser.error("--webhook-cert-secret and --webhook-cert exclude each other")
    return args


def _list_env(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


def network_settings(args: argparse.Namespace) -> network.NetworkSettings:
    """The --cluster-cidr, --sandbox-router and --client-cidr flags (ValueError on a bad one)."""
    import ipaddress

    cluster = tuple(str(ipaddress.ip_network(c, strict=False)) for c in args.cluster_cidr or ())
    clients = tuple(str(ipaddress.ip_network(c, strict=False)) for c in args.client_cidr or ())
    return network.NetworkSettings(
        cluster_cidrs=cluster,  # in addition to network.PRIVATE_CIDRS (egress_rules adds them)
        router=network.parse_router(args.sandbox_router) if args.sandbox_router else None,
        client_cidrs=clients,
    )


def webhook_config(args: argparse.Namespace) -> webhook.WebhookConfig:
    return webhook.WebhookConfig(
        port=args.webhook_port,
        bind=args.bind,
        host=args.webhook_host,
        cert=args.webhook_cert,
        key=args.webhook_key,
        ca=args.webhook_ca,
        service=webhook.parse_service(args.webhook_service) if args.webhook_service else None,
        configuration=args.webhook_configuration or None,
        cert_secret=_namespaced(args.webhook_cert_secret),
        generate=args.webhook_cert_generate,
        client_ca=args.webhook_client_ca,
        client_names=tuple(args.webhook_client_name or ()),
    )


def issuer_config(args: argparse.Namespace) -> IssuerConfig | None:
    """The router credential issuer, when --router-token-key-file is given (SystemExit on a bad flag)."""
    if not args.router_token_key_file:
        return None
    if args.router_token_ttl < issuer_server.MIN_TTL:
        raise SystemExit(
            f"agentsession-operator: --router-token-ttl {args.router_token_ttl}: at least {issuer_server.MIN_TTL} "
            f"seconds (clients renew a token {ra.RENEW_MARGIN} s before it expires)"
        )
    configmap = _namespaced(args.router_issuer_configmap)
    if configmap is None or not all(configmap):
        raise SystemExit(
            f"agentsession-operator: --router-issuer-configmap {args.router_issuer_configmap!r}: "
            "expected NAMESPACE/NAME"
        )
    try:
        Path(args.router_token_key_file).read_bytes()
    except OSError as err:
        raise SystemExit(f"agentsession-operator: --router-token-key-file: {err}") from err
    return IssuerConfig(
        key_file=Path(args.router_token_key_file),
        key_id=args.router_token_key_id,
        bind=args.bind,
        port=args.router_issuer_port,
        ttl=args.router_token_ttl,
        url=args.router_issuer_url,
        configmap=configmap,
    )


def _namespaced(text: str | None) -> tuple[str, str] | None:
    if not text:
        return None
    namespace, _, name = text.partition("/")
    return namespace, name


def election(args: argparse.Namespace) -> Election | None:
    if not args.leader_elect:
        return None
    timing = Timing(args.lease_duration, args.renew_deadline, args.retry_period)
    namespace = args.lease_namespace or _own_namespace()
    return Election(namespace, args.lease_name, default_identity(), timing, shards=args.shards)


def agent_ca_secret(args: argparse.Namespace) -> tuple[str, str] | None:
    """--node-agent-ca-secret, by default the operator's own namespace's (only with --node-agent)."""
    if not args.node_agent:
        return None
    return _namespaced(args.node_agent_ca_secret or f"{_own_namespace()}/{AGENT_CA_SECRET}")


def _own_account() -> str:
    """In a pod given $POD_NAMESPACE and $POD_SERVICE_ACCOUNT (config/'s Deployment sets both from the
    downward API): "NAMESPACE/ACCOUNT", for the node agents' per-node tokens; else ""."""
    namespace, account = os.environ.get("POD_NAMESPACE", ""), os.environ.get("POD_SERVICE_ACCOUNT", "")
    return f"{namespace}/{account}" if namespace and account else ""


def _own_namespace() -> str:
    """In a pod, the service account's namespace; outside, the kubeconfig context's; else default."""
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "default"
    except OSError:
        pass
    try:
        _, active = kube_config.list_kube_config_contexts()
        return str((active.get("context") or {}).get("namespace") or "default")
    except Exception:  # no kubeconfig: the connection fails later with a clearer message
        return "default"


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


def check_router(args: argparse.Namespace) -> None:
    """The router is admitted only once it refused a call without a credential (--sandbox-router-url); the
    deprecated unchecked --sandbox-router-authorizes is still taken, loudly. Otherwise --sandbox-router is
    dropped: an admitted router that does not authorize is a way into every sandbox (issue 28 item 3)."""
    if not args.sandbox_router:
        return
    log = structlog.get_logger("agentsession.network")
    if args.sandbox_router_url:
        verdict = router_check.check(args.sandbox_router_url)
        if verdict.admitted:
            log.info("sandbox router admitted", router=args.sandbox_router, why=verdict.reason)
            return
        log.error("sandbox router NOT admitted", router=args.sandbox_router, why=verdict.reason)
        args.sandbox_router = None
        return
    if args.sandbox_router_authorizes:
        log.warning(
            "the sandbox router is admitted unchecked (--sandbox-router-authorizes is deprecated)",
            router=args.sandbox_router,
            fix="give --sandbox-router-url: the operator then checks the router refuses a call without a credential",
        )
        return
    log.warning(
        "the sandbox router is admitted to every sandbox: any pod that reaches it reaches every session",
        router=args.sandbox_router,
        fix="run the router with --authz-mode=scoped-token (config/components/sandbox-router) and give the operator "
        "--sandbox-router-url, or leave --sandbox-router unset",
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logs.configure(args.log_level, json=args.log_format == "json")
    check_router(args)
    asyncio.run(_preflight())  # a clear message, not a stack trace, against a too-old agent-sandbox or CRD
    if args.metrics_port:
        if not args.leader_elect:
            metrics.LEADER.set(1)  # no election: this process always reconciles
        metrics.serve(args.metrics_port, args.bind)
    registry = kopf.get_default_registry()
    import agentsession_operator.handlers  # noqa: F401 - registers the startup and watch handlers

    if args.node_agent:
        certificates.register(registry)  # the agents' certificate requests: signed here
    config = webhook_config(args)
    if config.enabled:
        try:
            webhook.ensure_port_free(config)
        except OSError as err:
            raise SystemExit(f"agentsession-operator: webhook port {args.bind}:{args.webhook_port}: {err}") from err
        admission.register(registry)  # handlers.startup then configures the server (settings.admission)
        if not config.client_ca:
            warn_unauthenticated_webhook()

    asyncio.run(
        kopf.operator(
            registry=registry,
            memo=kopf.Memo(
                state=OperatorState(
                    webhook=config,
                    namespaces=tuple(args.namespace or ()),
                    election=election(args),
                    network=network_settings(args),
                    expiry_warning=None if args.expiry_warning == "0" else parse_duration(args.expiry_warning),
                    resync_period=args.resync_period,
                    node_agent=args.node_agent,
                    node_agent_token=Path(args.node_agent_token),
                    node_agent_account=args.node_agent_account,
                    node_agent_ca_secret=agent_ca_secret(args),
                    max_checkpoint_bytes=args.max_checkpoint_size,
                    max_sessions_per_namespace=args.max_sessions_per_namespace,
                    issuer=issuer_config(args),
                )
            ),
            standalone=True,
            clusterwide=not args.namespace,
            namespaces=args.namespace or [],
            liveness_endpoint=f"http://{args.bind}:{args.health_port}/healthz" if args.health_port else None,
        )
    )
