"""The operator's configuration: one frozen object, every flag a typed field (issue 50 item 4).

Each field of :class:`OperatorSettings` declares its command-line face in its metadata (:func:`flag`: the
option names, the environment variable giving its default, the help, the group); :func:`parser` builds the
argparse parser from the fields in one loop, so no flag exists without its field nor a field without its
flag. :meth:`OperatorSettings.from_argv` parses (reading the environment variables then, not at import),
checks the rules between flags and returns the object. What the rest of the operator takes (the network
settings, the webhook's and the issuer's configurations, the election) is built from it by its methods;
cli.py hands the object itself, with what it built from it, to the handlers (``OperatorState.settings``,
handlers/state.py): this module is a layer below them.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import os
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import agentsession_api
import agentsession_operator
from agentsession_api import router_access as ra
from agentsession_api.durations import parse_duration
from agentsession_operator.admission import server as webhook
from agentsession_operator.decisions import network, quota
from agentsession_operator.issuer import server as issuer_server
from agentsession_operator.issuer.server import IssuerConfig
from agentsession_operator.kube.agent_certificates import AGENT_CA_SECRET
from agentsession_operator.kube.api import ConfigError, load_credentials
from agentsession_operator.kube.election import MAX_SHARDS, Timing, default_identity
from agentsession_operator.kube.node_agent import TOKEN_PATH

PROG = "agentsession-operator"
FLAG = "flag"
"""The key of a field's :class:`Flag` in its metadata."""

LEADER = "leader election (run several replicas: one reconciles, the others stand by)"
NETWORK = "sandbox network (each session's own NetworkPolicy)"
ISSUER = "router credentials (the operator issues per-session tokens for the router)"
WEBHOOK = "admission webhook (AgentSessionPolicy enforced on CREATE/UPDATE)"

_YES, _NO = ("1", "true", "yes"), ("0", "false", "no")


@dataclass(frozen=True)
class Flag:
    """A field's command-line face. What argparse does with it follows the field's type: a bool is a
    switch, a tuple a repeatable flag, an int, float or Path is converted (unless ``type`` says how)."""

    names: tuple[str, ...]
    help: str | None = None
    env: tuple[str, ...] = ()
    """Variables giving the default, read when parsing: the first one set and not empty wins (a repeatable
    flag's: comma-separated, added to by the flag; a switch's: a yes or no word)."""
    blank_env: bool = False
    """The first variable set, even empty, wins: its "" says something the field's default does not."""
    group: str | None = None
    """The title of its group in --help (None: the parser's own options)."""
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    negatable: bool = False
    """A switch that also has its --no- form (argparse.BooleanOptionalAction); otherwise store_true."""


def flag(
    *names: str,
    default: Any = dataclasses.MISSING,
    default_factory: Callable[[], Any] | None = None,
    env: str | tuple[str, ...] = (),
    **face: Any,
) -> Any:
    """A field of :class:`OperatorSettings` and its :class:`Flag` (``face``: the rest of its fields)."""
    spec = Flag(names, env=(env,) if isinstance(env, str) else env, **face)
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata={FLAG: spec})
    return dataclasses.field(default=default, metadata={FLAG: spec})


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _own_account() -> str:
    """In a pod given $POD_NAMESPACE and $POD_SERVICE_ACCOUNT (config/'s Deployment sets both from the
    downward API): "NAMESPACE/ACCOUNT", for the node agents' per-node tokens; else ""."""
    namespace, account = os.environ.get("POD_NAMESPACE", ""), os.environ.get("POD_SERVICE_ACCOUNT", "")
    return f"{namespace}/{account}" if namespace and account else ""


def own_namespace() -> str:
    """In a pod, the service account's namespace; outside, the kubeconfig context's; else default."""
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "default"
    except OSError:
        pass
    try:
        return load_credentials().namespace
    except (ConfigError, OSError, ValueError):  # no kubeconfig: the connection fails later with a clearer message
        return "default"


def _namespaced(text: str | None) -> tuple[str, str] | None:
    if not text:
        return None
    namespace, _, name = text.partition("/")
    return namespace, name


@dataclass(frozen=True)
class Election:
    """Leader election's Lease and timing (--lease-*), built by :meth:`OperatorSettings.election`.
    With shards above 1 (--shards), one Lease per shard named after `name` (kube/election/sharding.py)."""

    namespace: str
    name: str
    identity: str
    timing: Timing
    shards: int = 1


@dataclass(frozen=True)
class OperatorSettings:
    """Every flag of the operator, as parsed (the field names are argparse's dests: --webhook-port is
    ``webhook_port``); fields in the order --help lists them."""

    namespace: tuple[str, ...] = flag(
        "--namespace", "-n", default=(), help="watch only this namespace (repeatable; default: all namespaces)"
    )
    metrics_port: int = flag(
        "--metrics-port", default=8080, env="METRICS_PORT", help="Prometheus metrics port (0 disables)"
    )
    health_port: int = flag(
        "--health-port",
        default=8081,
        env="HEALTH_PORT",
        help="liveness endpoint port, served at /healthz (0 disables)",
    )
    bind: str = flag(
        "--bind",
        default="127.0.0.1",
        env="BIND_ADDRESS",
        help="address for the webhook, metrics and health endpoints (default loopback; the Deployment sets 0.0.0.0)",
    )
    resync_period: float = flag(
        "--resync-period",
        default=300.0,
        env="RESYNC_PERIOD",
        help="seconds between relists that drop cached objects deleted while a watch was down",
    )
    log_format: str = flag("--log-format", default="json", env="LOG_FORMAT", choices=("json", "console"))
    log_level: str = flag("--log-level", default="INFO", env="LOG_LEVEL")
    node_agent: str | None = flag(
        "--node-agent",
        default=None,
        env="NODE_AGENT",
        help="NAMESPACE/key=value: the node agent's pods (config/components/nodeagent), which checkpoint a "
        "gVisor sandbox for idleAction Hibernate; default: none (Hibernate suspends as Suspend)",
    )
    node_agent_token: Path = flag(  # noqa: RUF009 - flag() is dataclasses.field()
        "--node-agent-token",
        default=TOKEN_PATH,
        env="NODE_AGENT_TOKEN",
        help="the operator's token for the node agent, bound to its audience (default: the projected token "
        "config/components/nodeagent mounts; an operator outside the cluster names a file)",
    )
    node_agent_account: str = flag(
        "--node-agent-account",
        default_factory=_own_account,
        env="NODE_AGENT_ACCOUNT",
        help="NAMESPACE/SERVICEACCOUNT: the operator's own account, for which it mints each node's agent a "
        "token of that node's audience (TokenRequest; default in a pod: $POD_NAMESPACE/$POD_SERVICE_ACCOUNT); "
        "empty: --node-agent-token goes to every agent",
    )
    node_agent_ca_secret: str = flag(
        "--node-agent-ca-secret",
        default="",
        env="NODE_AGENT_CA_SECRET",
        help="NAMESPACE/NAME: the Secret of the node agents' CA, made by the operator, which signs each agent's "
        "certificate for its node and verifies it before sending a token (default: "
        f"<own namespace>/{AGENT_CA_SECRET}, shipped empty with config/components/nodeagent)",
    )
    max_checkpoint_size: int = flag(
        "--max-checkpoint-size",
        default=512 * 1024 * 1024,
        env="MAX_CHECKPOINT_BYTES",
        help="bytes: a larger checkpoint is deleted and the session suspends as Suspend (default 512 MiB)",
    )
    max_sessions_per_namespace: int = flag(
        "--max-sessions-per-namespace",
        default=quota.DEFAULT_MAX_SESSIONS_PER_NAMESPACE,
        env="MAX_SESSIONS_PER_NAMESPACE",
        type=_non_negative,
        help="unfinished AgentSessions a namespace may hold when no AgentSessionPolicy sets "
        "cleanup.maxSessionsPerNamespace there (default %(default)s; 0: no cap): one tenant cannot grow the "
        "operator for everyone",
    )
    expiry_warning: str = flag(
        "--expiry-warning",
        default="10m",
        env="EXPIRY_WARNING",
        help="post an ExpiringSoon Warning Event this long before a session's TTL ends (Go duration; 0: never)",
    )
    leader_elect: bool = flag(
        "--leader-elect",
        default=True,
        env="LEADER_ELECT",
        negatable=True,
        group=LEADER,
        help="reconcile only while holding the Lease (default: on; off: this process always reconciles)",
    )
    lease_namespace: str | None = flag(
        "--lease-namespace",
        default=None,
        env=("LEASE_NAMESPACE", "POD_NAMESPACE"),
        group=LEADER,
        help="namespace of the Lease (default: $POD_NAMESPACE, else the service account's or kubeconfig's namespace)",
    )
    lease_name: str = flag("--lease-name", default="agentsession-operator", env="LEASE_NAME", group=LEADER)
    lease_duration: float = flag(
        "--lease-duration", default=10.0, group=LEADER, help="seconds a standby waits on a silent leader"
    )
    renew_deadline: float = flag(
        "--renew-deadline", default=7.0, group=LEADER, help="seconds the leader acts after a renewal"
    )
    retry_period: float = flag("--retry-period", default=2.0, group=LEADER, help="seconds between lease rounds")
    shards: int = flag(
        "--shards",
        default=1,
        env="SHARDS",
        group=LEADER,
        help="split the namespaces into this many shards, one Lease each, shared out among the replicas "
        "(1: one Lease, one replica reconciles everything; the same on every replica; docs/operations.md)",
    )
    cluster_cidr: tuple[str, ...] = flag(
        "--cluster-cidr",
        default=(),
        env="CLUSTER_CIDRS",
        group=NETWORK,
        help="the cluster's pod or Service range, cut out of every CIDR a policy's egress allows unless "
        "that CIDR lies inside it (repeat; env CLUSTER_CIDRS, comma-separated); added to the private "
        "ranges, which are always cut out the same way",
    )
    sandbox_router: str | None = flag(
        "--sandbox-router",
        default=None,
        env="SANDBOX_ROUTER",
        group=NETWORK,
        help="NAMESPACE/key=value[,key=value]: the sandbox router's pods, admitted to every sandbox "
        "(e.g. agent-sandbox-system/app=sandbox-router); default: none. The router forwards to whatever "
        "session a caller names: admit it only once it authorizes every call for its session",
    )
    sandbox_router_url: str = flag(
        "--sandbox-router-url",
        default="",
        env="SANDBOX_ROUTER_URL",
        group=NETWORK,
        help="the --sandbox-router's proxy URL (e.g. http://agentsession-sandbox-router.agentsession-system:8080): "
        "at start the operator sends it a call without a credential and admits the router only if it answers 401",
    )
    sandbox_router_authorizes: bool = flag(
        "--sandbox-router-authorizes",
        default=False,
        env="SANDBOX_ROUTER_AUTHORIZES",
        group=NETWORK,
        help="deprecated (unchecked; give --sandbox-router-url and the operator checks): say that the "
        "--sandbox-router authorizes every call for its session",
    )
    client_cidr: tuple[str, ...] = flag(
        "--client-cidr",
        default=(),
        env="CLIENT_CIDRS",
        group=NETWORK,
        help="a CIDR also admitted to every sandbox, e.g. a gateway outside the cluster (repeat; env CLIENT_CIDRS)",
    )
    router_token_key_file: Path | None = flag(  # noqa: RUF009 - flag() is dataclasses.field()
        "--router-token-key-file",
        default=None,
        env="ROUTER_TOKEN_KEY_FILE",
        group=ISSUER,
        help="PEM Ed25519 private key that signs the sandbox router's scoped tokens (v2); setting it turns the "
        "issuer on (the router holds the public half: python -m agentsession_operator.issuer.keys)",
    )
    router_token_key_id: str = flag(
        "--router-token-key-id",
        default="",
        group=ISSUER,
        help="the key's ID in the router's key set (default: derived from the public key)",
    )
    router_issuer_port: int = flag(
        "--router-issuer-port",
        default=issuer_server.DEFAULT_PORT,
        group=ISSUER,
        help="HTTPS port of the issuer, on --bind",
    )
    router_issuer_url: str = flag(
        "--router-issuer-url",
        default="",
        env="ROUTER_ISSUER_URL",
        group=ISSUER,
        help="the URL clients dial, as published (in a cluster: the operator Service's, e.g. "
        "https://agentsession-operator.agentsession-system.svc:9444; default: https://<--bind>:<port>)",
    )
    router_token_ttl: int = flag(
        "--router-token-ttl",
        default=issuer_server.DEFAULT_TTL,
        group=ISSUER,
        help=f"seconds a router token stays valid (at least {issuer_server.MIN_TTL}: clients renew a token "
        f"{ra.RENEW_MARGIN} s before it expires)",
    )
    router_issuer_configmap: str = flag(
        "--router-issuer-configmap",
        default=f"{ra.ISSUER_CONFIGMAP_NAMESPACE}/{ra.ISSUER_CONFIGMAP}",
        group=ISSUER,
        help="NAMESPACE/NAME of the ConfigMap where the issuer's URL and CA are published (shipped empty)",
    )
    webhook_port: int = flag(
        "--webhook-port",
        default=webhook.DEFAULT_PORT,
        env="WEBHOOK_PORT",
        group=WEBHOOK,
        help="HTTPS port of the validating webhook, listening on --bind (0 disables the webhook)",
    )
    webhook_host: str | None = flag(
        "--webhook-host",
        default=None,
        env="WEBHOOK_HOST",
        group=WEBHOOK,
        help="host in the webhook URL the API server calls (default: the --bind address; 0.0.0.0 gives 127.0.0.1)",
    )
    webhook_service: str | None = flag(
        "--webhook-service",
        default=None,
        env="WEBHOOK_SERVICE",
        group=WEBHOOK,
        metavar="NAMESPACE/NAME[:PORT]",
        help="reach the webhook through this Service (port default 443) instead of a URL (in-cluster)",
    )
    webhook_cert: str | None = flag(
        "--webhook-cert", default=None, group=WEBHOOK, help="serving certificate (PEM); default: a generated one"
    )
    webhook_key: str | None = flag(
        "--webhook-key", default=None, group=WEBHOOK, help="private key of --webhook-cert (PEM)"
    )
    webhook_ca: str | None = flag(
        "--webhook-ca", default=None, group=WEBHOOK, help="CA bundle for the API server (default: --webhook-cert)"
    )
    webhook_cert_secret: str | None = flag(
        "--webhook-cert-secret",
        default=None,
        env="WEBHOOK_CERT_SECRET",
        group=WEBHOOK,
        metavar="NAMESPACE/NAME",
        help="one certificate for every replica and restart, from this Secret (tls.crt, tls.key, ca.crt)",
    )
    webhook_cert_generate: bool = flag(
        "--webhook-cert-generate",
        default=True,
        negatable=True,
        group=WEBHOOK,
        help="fill the --webhook-cert-secret Secret when it has no usable certificate (off: it is provided, "
        "e.g. by cert-manager, and waited for)",
    )
    webhook_configuration: str = flag(
        "--webhook-configuration",
        default=webhook.CONFIGURATION,
        env="WEBHOOK_CONFIGURATION",
        blank_env=True,  # WEBHOOK_CONFIGURATION="": leave it alone
        group=WEBHOOK,
        help="the shipped ValidatingWebhookConfiguration whose clientConfig and caBundle this operator patches "
        "(empty: leave it alone)",
    )
    webhook_client_ca: str | None = flag(
        "--webhook-client-ca",
        default=None,
        env="WEBHOOK_CLIENT_CA",
        group=WEBHOOK,
        metavar="PEM_FILE",
        help="require a client certificate signed by this CA: the one the API server presents to webhooks "
        "(its AdmissionConfiguration kubeConfigFile); callers without one are refused in the TLS handshake",
    )
    webhook_client_name: tuple[str, ...] = flag(
        "--webhook-client-name",
        default=(),
        env="WEBHOOK_CLIENT_NAMES",
        group=WEBHOOK,
        help="with --webhook-client-ca: the client certificate's common name (or a DNS name) must be this one "
        "(repeat; env WEBHOOK_CLIENT_NAMES); default: any certificate the CA signed",
    )

    @classmethod
    def from_argv(cls, argv: Sequence[str] | None = None, *, description: str | None = None) -> OperatorSettings:
        """The settings the command line and the environment give; on a bad flag, or flags that do not go
        together, the usage and the reason on stderr and exit 2 (argparse's parser.error)."""
        command = parser(description)
        parsed = vars(command.parse_args(argv))
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {
            f.name: tuple(parsed[f.name] or ()) if _origin(hints[f.name]) is tuple else parsed[f.name]
            for f in dataclasses.fields(cls)
        }
        settings = cls(**values)
        for problem in settings.problems():
            command.error(problem)
        return settings

    def problems(self) -> Iterator[str]:
        """What the flags say together that cannot hold, first the one parse_args reports."""
        if self.webhook_client_name and not self.webhook_client_ca:
            yield "--webhook-client-name needs --webhook-client-ca"
        if bool(self.webhook_cert) != bool(self.webhook_key):
            yield "--webhook-cert and --webhook-key go together"
        if not 1 <= self.shards <= MAX_SHARDS:
            yield f"--shards: expected 1 to {MAX_SHARDS}, got {self.shards}"
        if self.shards > 1 and not self.leader_elect:
            yield "--shards above 1 needs leader election (a Lease per shard): drop --no-leader-elect"
        try:
            self.timing()
        except ValueError as err:
            yield str(err)
        try:
            self.network_settings()
        except ValueError as err:
            yield str(err)
        if self.expiry_warning != "0":
            try:
                parse_duration(self.expiry_warning)
            except ValueError as err:
                yield f"--expiry-warning: {err}"
        if self.webhook_service:
            try:
                webhook.parse_service(self.webhook_service)
            except ValueError as err:
                yield f"--webhook-service: {err}"
        if self.webhook_cert_secret:
            namespace, _, name = self.webhook_cert_secret.partition("/")
            if not namespace or not name or "/" in name:
                yield f"--webhook-cert-secret: expected namespace/name, got {self.webhook_cert_secret!r}"
            if self.webhook_cert:
                yield "--webhook-cert-secret and --webhook-cert exclude each other"
        if self.router_token_key_file:
            if self.router_token_ttl < issuer_server.MIN_TTL:
                yield (
                    f"--router-token-ttl {self.router_token_ttl}: at least {issuer_server.MIN_TTL} "
                    f"seconds (clients renew a token {ra.RENEW_MARGIN} s before it expires)"
                )
            configmap = _namespaced(self.router_issuer_configmap)
            if configmap is None or not all(configmap):
                yield f"--router-issuer-configmap {self.router_issuer_configmap!r}: expected NAMESPACE/NAME"

    def network_settings(self) -> network.NetworkSettings:
        """The --cluster-cidr, --sandbox-router and --client-cidr flags (ValueError on a bad one)."""
        return network.NetworkSettings(
            # in addition to network.PRIVATE_CIDRS (egress_rules adds them)
            cluster_cidrs=tuple(str(ipaddress.ip_network(c, strict=False)) for c in self.cluster_cidr),
            router=network.parse_router(self.sandbox_router) if self.sandbox_router else None,
            client_cidrs=tuple(str(ipaddress.ip_network(c, strict=False)) for c in self.client_cidr),
        )

    def webhook_config(self) -> webhook.WebhookConfig:
        return webhook.WebhookConfig(
            port=self.webhook_port,
            bind=self.bind,
            host=self.webhook_host,
            cert=self.webhook_cert,
            key=self.webhook_key,
            ca=self.webhook_ca,
            service=webhook.parse_service(self.webhook_service) if self.webhook_service else None,
            configuration=self.webhook_configuration or None,
            cert_secret=_namespaced(self.webhook_cert_secret),
            generate=self.webhook_cert_generate,
            client_ca=self.webhook_client_ca,
            client_names=self.webhook_client_name,
        )

    def issuer_config(self) -> IssuerConfig | None:
        """The router credential issuer, when --router-token-key-file is given (its flags checked by problems();
        SystemExit when the key file cannot be read)."""
        if not self.router_token_key_file:
            return None
        namespace, _, name = self.router_issuer_configmap.partition("/")
        try:
            self.router_token_key_file.read_bytes()
        except OSError as err:
            raise SystemExit(f"{PROG}: --router-token-key-file: {err}") from err
        return IssuerConfig(
            key_file=self.router_token_key_file,
            key_id=self.router_token_key_id,
            bind=self.bind,
            port=self.router_issuer_port,
            ttl=self.router_token_ttl,
            url=self.router_issuer_url,
            configmap=(namespace, name),
        )

    def timing(self) -> Timing:
        """--lease-duration, --renew-deadline and --retry-period (ValueError when they do not fit)."""
        return Timing(self.lease_duration, self.renew_deadline, self.retry_period)

    def election(self) -> Election | None:
        """The Lease to hold (None with --no-leader-elect: this process always reconciles)."""
        if not self.leader_elect:
            return None
        namespace = self.lease_namespace or own_namespace()
        return Election(namespace, self.lease_name, default_identity(), self.timing(), shards=self.shards)

    def agent_ca_secret(self) -> tuple[str, str] | None:
        """--node-agent-ca-secret, by default the operator's own namespace's (only with --node-agent)."""
        if not self.node_agent:
            return None
        return _namespaced(self.node_agent_ca_secret or f"{own_namespace()}/{AGENT_CA_SECRET}")

    def expiry_warning_time(self) -> timedelta | None:
        """--expiry-warning (None: "0", never)."""
        return None if self.expiry_warning == "0" else parse_duration(self.expiry_warning)

    def liveness_endpoint(self) -> str | None:
        return f"http://{self.bind}:{self.health_port}/healthz" if self.health_port else None


def parser(description: str | None = None) -> argparse.ArgumentParser:
    """The command line, one option per field of :class:`OperatorSettings` (and --version), each group's
    options in the fields' order; the defaults are the environment's as it is now."""
    command = argparse.ArgumentParser(prog=PROG, description=description)
    command.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {agentsession_operator.__version__} (agentsession-api {agentsession_api.__version__})",
    )
    add: dict[str | None, Callable[..., argparse.Action]] = {None: command.add_argument}
    hints = typing.get_type_hints(OperatorSettings)
    for field in dataclasses.fields(OperatorSettings):
        spec: Flag = field.metadata[FLAG]
        if spec.group not in add:
            add[spec.group] = command.add_argument_group(spec.group).add_argument
        add[spec.group](*spec.names, dest=field.name, help=spec.help, **_argparse(field, spec, hints[field.name]))
    return command


def _origin(hint: Any) -> Any:
    """The type a hint converts to: ``int`` for ``int`` or ``int | None``, ``tuple`` for ``tuple[str, ...]``."""
    if isinstance(hint, types.UnionType):
        (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    return typing.get_origin(hint) or hint


def _argparse(field: dataclasses.Field[Any], spec: Flag, hint: Any) -> dict[str, Any]:
    """add_argument's keywords for a field: its action, conversion and default."""
    kind = _origin(hint)
    if kind is bool:
        action: Any = argparse.BooleanOptionalAction if spec.negatable else "store_true"
        return {"action": action, "default": _default(field, spec, kind)}
    face = {"choices": spec.choices, "metavar": spec.metavar}
    face = {key: value for key, value in face.items() if value is not None}
    if kind is tuple:
        return {"action": "append", "default": _default(field, spec, kind), **face}
    convert = spec.type or (kind if kind in (int, float, Path) else None)
    return {"type": convert, "default": _default(field, spec, kind), **face}


def _default(field: dataclasses.Field[Any], spec: Flag, kind: Any) -> Any:
    """The environment's value (as text: argparse converts it as it converts the flag's), else the field's."""
    default: Any = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
    for name in spec.env:
        text = os.environ.get(name)
        if text is None or (text == "" and not spec.blank_env):
            continue
        if kind is bool:
            return text.lower() not in _NO if default else text.lower() in _YES
        if kind is tuple:
            return [item.strip() for item in text.split(",") if item.strip()]
        return text
    if kind is tuple:  # append adds each flag to a copy of this list
        return list(default)
    return default
