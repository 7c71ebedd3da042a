"""Issue 28 item 3: the sandbox router is a bypass, so what config/ and the chart ship admits no router.

Attack: upstream's router picks its target from the caller's X-Sandbox-* headers and, by default
(`--authz-mode=allow-all`), forwards for everyone. With every session's NetworkPolicy admitting the router's
pods, any pod that reaches the router reaches every sandbox. These tests read the operator's arguments from
the shipped Deployment and the chart's default values, build the NetworkPolicy that operator writes, and
look for a peer that is not the session's own namespace's clients.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from agentsession_operator import cli
from agentsession_operator.decisions import network
from agentsession_operator.issuer import router_check

ROOT = Path(__file__).resolve().parents[3]


def _operator_args() -> list[str]:
    docs = [d for d in yaml.safe_load_all((ROOT / "config/manager/deployment.yaml").read_text()) if d]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "operator"]
    return [str(a) for a in container.get("args") or []]


def _peers(settings: network.NetworkSettings) -> list[dict[str, Any]]:
    session = {"metadata": {"name": "s", "namespace": "team-a", "uid": "u-1"}}
    claim = {"metadata": {"name": "c", "namespace": "team-a", "uid": "claim-uid"}}
    policy = network.desired_network_policy(session, claim, network.NO_EGRESS, settings)
    return [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]


def _foreign(peers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Peers outside the session's own namespace (a namespaceSelector) or beyond its clients."""
    own = {"podSelector": {"matchLabels": {"agentsession.dev/sandbox-client": "true"}}}
    return [p for p in peers if p != own]


def test_the_shipped_operator_admits_no_router_to_any_sandbox() -> None:
    settings = cli.parse_args(_operator_args()).network_settings()
    assert settings.router is None
    assert _foreign(_peers(settings)) == []


def test_the_charts_default_values_admit_no_router() -> None:
    values = yaml.safe_load((ROOT / "charts/agentsession/values.yaml").read_text())
    assert not values.get("sandboxRouter"), values.get("sandboxRouter")


def test_a_configured_router_is_admitted_by_its_namespace_and_labels_only() -> None:
    settings = cli.parse_args(["--sandbox-router=gateway-system/app=my-router"]).network_settings()
    assert _foreign(_peers(settings)) == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway-system"}},
            "podSelector": {"matchLabels": {"app": "my-router"}},
        }
    ]


@pytest.mark.parametrize("text", ["agent-sandbox-system", "agent-sandbox-system/", "/app=router", "ns/app"])
def test_a_router_without_namespace_or_labels_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="NAMESPACE/key=value"):
        network.parse_router(text)


ROUTER = "--sandbox-router=agent-sandbox-system/app=sandbox-router"


def test_a_configured_router_is_a_loud_warning_unless_checked_or_said_to_authorize() -> None:
    with capture_logs() as logs:
        cli.check_router(cli.parse_args([ROUTER]))
    (warning,) = [e for e in logs if e["log_level"] == "warning"]
    assert "every sandbox" in warning["event"] and "--authz-mode=scoped-token" in warning["fix"]
    with capture_logs() as logs:
        args = cli.check_router(cli.parse_args([ROUTER, "--sandbox-router-authorizes"]))
        cli.check_router(cli.parse_args([]))
    (deprecated,) = [e for e in logs if e["log_level"] == "warning"]
    assert "deprecated" in deprecated["event"] and args.sandbox_router, deprecated


@pytest.mark.parametrize(
    ("answer", "admitted"),
    [(401, True), (200, False), (502, False), (404, False), (403, False), (router_check.SILENT, False)],
)
def test_the_router_is_admitted_only_when_it_refuses_a_call_without_a_credential(answer: int, admitted: bool) -> None:
    """Issue 51 item 2: upstream's allow-all router tries to route a call naming no Sandbox (502, 404); one that
    authorizes answers 401 before looking. Only that one is admitted."""
    verdict = router_check.check("http://router:8080", ask=lambda url, timeout: answer, sleep=lambda s: None)
    assert verdict.admitted is admitted, verdict


def test_a_router_that_never_answers_is_not_admitted() -> None:
    def refused(url: str, timeout: float) -> int:
        raise ConnectionRefusedError("refused")

    verdict = router_check.check("http://router:8080", wait=0.0, ask=refused, sleep=lambda s: None)
    assert not verdict.admitted and "did not answer" in verdict.reason


def test_the_operator_drops_a_router_that_answers_without_a_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router_check, "_ask", lambda url, timeout: 502)
    args = cli.parse_args([ROUTER, "--sandbox-router-url=http://router:8080", "--sandbox-router-authorizes"])
    with capture_logs() as logs:
        checked = cli.check_router(args)
    assert checked.sandbox_router is None and checked.network_settings().router is None
    assert args.sandbox_router, "the parsed settings stay as they were: check_router returns new ones"
    assert any(e["log_level"] == "error" and "NOT admitted" in e["event"] for e in logs), logs
