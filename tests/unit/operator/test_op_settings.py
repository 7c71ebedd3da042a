"""The operator's flags are one frozen object (settings.py, issue 50 item 4): every field of OperatorSettings is
a flag, every flag is a field, and the environment's defaults are read when parsing."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from agentsession_operator import cli, settings
from agentsession_operator.settings import FLAG, Flag, OperatorSettings

FIELDS = dataclasses.fields(OperatorSettings)


def _flags() -> dict[str, Any]:
    """The parser's options by dest, but --help and --version (no setting)."""
    return {a.dest: a for a in settings.parser()._actions if a.dest not in ("help", "version")}


def test_every_field_is_a_flag_and_every_flag_a_field() -> None:
    flags = _flags()
    assert {f.name for f in FIELDS} == set(flags)
    for field in FIELDS:
        spec = field.metadata[FLAG]
        assert isinstance(spec, Flag)
        assert tuple(flags[field.name].option_strings[: len(spec.names)]) == spec.names
        # the dest is argparse's own for the first option: --webhook-port is webhook_port
        assert spec.names[0].removeprefix("--").replace("-", "_") == field.name


def test_help_lists_one_group_per_title_in_the_fields_order() -> None:
    groups = settings.parser()._action_groups
    titles = [settings.LEADER, settings.NETWORK, settings.ISSUER, settings.WEBHOOK]
    assert [g.title for g in groups] == ["positional arguments", "options", *titles]
    order = [f.name for f in FIELDS]
    for group in groups:
        dests = [a.dest for a in group._group_actions if a.dest in order]
        assert dests == sorted(dests, key=order.index), group.title


def test_the_settings_are_frozen_and_check_router_returns_new_ones() -> None:
    parsed = cli.parse_args(["--sandbox-router=ns/app=router"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.sandbox_router = None  # type: ignore[misc]
    assert isinstance(parsed.namespace, tuple) and isinstance(parsed.cluster_cidr, tuple)
    assert hash(parsed) == hash(cli.parse_args(["--sandbox-router=ns/app=router"]))


def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for field in FIELDS:
        for name in field.metadata[FLAG].env:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("POD_SERVICE_ACCOUNT", raising=False)


def test_without_flags_or_environment_the_fields_defaults_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    _clean(monkeypatch)
    assert cli.parse_args([]) == OperatorSettings()


# Every variable a field names, with a value and what the field then holds (a new one fails the test below).
ENVIRONMENT: dict[str, tuple[str, str, Any]] = {
    "METRICS_PORT": ("1", "metrics_port", 1),
    "HEALTH_PORT": ("2", "health_port", 2),
    "BIND_ADDRESS": ("0.0.0.0", "bind", "0.0.0.0"),
    "RESYNC_PERIOD": ("3.5", "resync_period", 3.5),
    "LOG_FORMAT": ("console", "log_format", "console"),
    "LOG_LEVEL": ("DEBUG", "log_level", "DEBUG"),
    "NODE_AGENT": ("agents/app=nodeagent", "node_agent", "agents/app=nodeagent"),
    "NODE_AGENT_TOKEN": ("/run/token", "node_agent_token", Path("/run/token")),
    "NODE_AGENT_ACCOUNT": ("ops/operator", "node_agent_account", "ops/operator"),
    "NODE_AGENT_CA_SECRET": ("ops/ca", "node_agent_ca_secret", "ops/ca"),
    "MAX_CHECKPOINT_BYTES": ("1024", "max_checkpoint_size", 1024),
    "MAX_SESSIONS_PER_NAMESPACE": ("0", "max_sessions_per_namespace", 0),
    "EXPIRY_WARNING": ("5m", "expiry_warning", "5m"),
    "LEADER_ELECT": ("false", "leader_elect", False),
    "LEASE_NAMESPACE": ("leases", "lease_namespace", "leases"),
    "POD_NAMESPACE": ("ops", "lease_namespace", "ops"),  # when LEASE_NAMESPACE is not set
    "LEASE_NAME": ("lease", "lease_name", "lease"),
    "SHARDS": ("1", "shards", 1),
    "CLUSTER_CIDRS": ("10.0.0.0/8, fd00::/64", "cluster_cidr", ("10.0.0.0/8", "fd00::/64")),
    "SANDBOX_ROUTER": ("gw/app=router", "sandbox_router", "gw/app=router"),
    "SANDBOX_ROUTER_URL": ("http://router:8080", "sandbox_router_url", "http://router:8080"),
    "SANDBOX_ROUTER_AUTHORIZES": ("yes", "sandbox_router_authorizes", True),
    "CLIENT_CIDRS": ("192.0.2.0/24", "client_cidr", ("192.0.2.0/24",)),
    "ROUTER_TOKEN_KEY_FILE": ("/keys/key.pem", "router_token_key_file", Path("/keys/key.pem")),
    "ROUTER_ISSUER_URL": ("https://issuer", "router_issuer_url", "https://issuer"),
    "WEBHOOK_PORT": ("7443", "webhook_port", 7443),
    "WEBHOOK_HOST": ("hook.example", "webhook_host", "hook.example"),
    "WEBHOOK_SERVICE": ("ops/operator:8443", "webhook_service", "ops/operator:8443"),
    "WEBHOOK_CERT_SECRET": ("ops/cert", "webhook_cert_secret", "ops/cert"),
    "WEBHOOK_CONFIGURATION": ("other", "webhook_configuration", "other"),
    "WEBHOOK_CLIENT_CA": ("/ca.pem", "webhook_client_ca", "/ca.pem"),
    "WEBHOOK_CLIENT_NAMES": ("a,b", "webhook_client_name", ("a", "b")),
}


def test_every_variable_a_field_names_is_tested() -> None:
    assert {name for f in FIELDS for name in f.metadata[FLAG].env} == set(ENVIRONMENT)


@pytest.mark.parametrize("variable", sorted(ENVIRONMENT))
def test_a_variable_gives_its_fields_default_when_parsing(variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _clean(monkeypatch)
    if variable == "WEBHOOK_CLIENT_NAMES":
        monkeypatch.setenv("WEBHOOK_CLIENT_CA", "/ca.pem")  # names without the CA are refused
    value, field, expected = ENVIRONMENT[variable]
    monkeypatch.setenv(variable, value)  # after import: read by the parse
    assert getattr(cli.parse_args([]), field) == expected
    monkeypatch.setenv(variable, "")
    default = "" if variable == "WEBHOOK_CONFIGURATION" else getattr(OperatorSettings(), field)
    assert getattr(cli.parse_args([]), field) == default, "an empty variable is unset, but where it says something"


def test_an_empty_webhook_configuration_leaves_the_shipped_one_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBHOOK_CONFIGURATION", "")
    assert cli.parse_args([]).webhook_config().configuration is None


def test_a_flag_beats_its_variable_and_a_repeated_one_adds_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _clean(monkeypatch)
    monkeypatch.setenv("METRICS_PORT", "1")
    monkeypatch.setenv("LEADER_ELECT", "no")
    monkeypatch.setenv("CLUSTER_CIDRS", "10.0.0.0/8")
    parsed = cli.parse_args(["--metrics-port=2", "--leader-elect", "--cluster-cidr=172.16.0.0/12"])
    assert (parsed.metrics_port, parsed.leader_elect) == (2, True)
    assert parsed.cluster_cidr == ("10.0.0.0/8", "172.16.0.0/12")


def test_a_bad_variable_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MAX_SESSIONS_PER_NAMESPACE", "-1")
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_args([])
    assert exit_info.value.code == 2 and "must be 0 or more, got -1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--webhook-client-name=x"], "--webhook-client-name needs --webhook-client-ca"),
        (["--webhook-cert=c.pem"], "--webhook-cert and --webhook-key go together"),
        (["--shards=0"], "--shards: expected 1 to 64, got 0"),
        (["--shards=2", "--no-leader-elect"], "--shards above 1 needs leader election"),
        (["--lease-duration=1", "--renew-deadline=5"], "renew"),
        (["--cluster-cidr=nonsense"], "nonsense"),
        (["--sandbox-router=ns"], "NAMESPACE/key=value"),
        (["--expiry-warning=soon"], "--expiry-warning: "),
        (["--webhook-service=a"], "--webhook-service: "),
        (["--webhook-cert-secret=name"], "--webhook-cert-secret: expected namespace/name, got 'name'"),
        (
            ["--webhook-cert-secret=ns/name", "--webhook-cert=c", "--webhook-key=k"],
            "--webhook-cert-secret and --webhook-cert exclude each other",
        ),
    ],
)
def test_flags_that_do_not_go_together_are_a_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_args(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("usage: agentsession-operator") and message in err, err
