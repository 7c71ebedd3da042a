"""Issue 11: attacks on the pure decisions (idle clock, policy rules), each written before its fix."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from agentsession_api.timestamps import format_time, parse_time
from agentsession_operator.decisions import lifecycle
from agentsession_operator.decisions.policy_resolve import resolve
from agentsession_operator.decisions.resolved import Resolved
from agentsession_operator.decisions.status import compute_status

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
Make = Callable[..., dict[str, Any]]


# --- 6: busy= cannot pause the idle clock longer than the policy's maximum idle timeout ---------------
def test_busy_cannot_outlast_the_policy_max_idle_timeout() -> None:
    """Attack: `busy=604800` kept a session alive 7 days whatever maxIdleTimeout said."""
    last = T0
    deadline = lifecycle.idle_deadline(last, last + timedelta(days=7), timedelta(minutes=10), timedelta(minutes=10))
    assert deadline == last + timedelta(minutes=20)  # busy for at most the maximum, then idle for one timeout
    # Without a policy maximum the tenant chooses its own idle timeout anyway: busy protects a long command.
    assert lifecycle.idle_deadline(last, last + timedelta(hours=1), timedelta(minutes=10)) == last + timedelta(
        minutes=70
    )


def test_busy_recorded_by_the_operator_is_capped_by_the_policy_maximum() -> None:
    patch = lifecycle.activity_patch("2025-01-01T12:00:00Z busy=604800", T0, busy_cap=timedelta(minutes=10))
    assert patch is not None
    assert parse_time(patch["busyUntil"]) == T0 + timedelta(minutes=10)


def test_busy_status_written_before_a_policy_tightened_is_capped(make_session: Make, make_claim: Make) -> None:
    """busyUntil recorded under a loose policy counts only up to the maximum of the policy now in force."""
    resolved = Resolved(
        warm_pool="python-pool",
        ttl=None,
        idle_timeout=timedelta(minutes=5),
        idle_action="Delete",
        max_idle_timeout=timedelta(minutes=5),
    )
    claim = make_claim(sandbox_name="demo", ready=("True", "DependenciesReady", "Pod is Ready"), pod_ips=["127.1.0.5"])
    status = compute_status(make_session(), claim, None, T0, resolved=resolved)
    status["busyUntil"] = format_time(T0 + timedelta(days=7))
    later = compute_status(make_session(status=status), claim, None, T0 + timedelta(minutes=11), resolved=resolved)
    assert later["phase"] == "Expired"


# --- 8: policy label regexes run in linear time -------------------------------------------------------
CATASTROPHIC = "([a-z0-9]+-?)+"
HOSTILE_VALUE = "a" * 61 + "_a"  # a valid 63-character label value that almost matches


def test_catastrophic_label_regex_is_evaluated_fast(make_session: Make, make_policy: Make) -> None:
    """Attack: a policy pattern with nested quantifiers stalled the operator's event loop (minutes of CPU)."""
    import time

    from agentsession_operator.decisions import policy_merge, policy_violations

    session = make_session(labels={"team": HOSTILE_VALUE})
    effective = policy_merge.merge_policies([make_policy("p", spec={"labels": {"values": {"team": CATASTROPHIC}}})])
    started = time.monotonic()
    found = policy_violations.violations(session, effective)
    assert time.monotonic() - started < 1.0
    assert any("does not match the pattern" in v for v in found)


def test_valid_and_invalid_regexes_still_judged(make_session: Make, make_policy: Make) -> None:
    from agentsession_operator.decisions import policy, policy_merge, policy_violations

    effective = policy_merge.merge_policies([make_policy("p", spec={"labels": {"values": {"team": "[a-z]+"}}})])
    assert policy_violations.violations(make_session(labels={"team": "abc"}), effective) == []
    assert policy_violations.violations(make_session(labels={"team": "ABC"}), effective)
    assert policy.policy_errors(make_policy("p", spec={"labels": {"values": {"team": "([a-z"}}}))


# --- 9: env deny defaults, reserved label subdomains ----------------------------------------------------
import pytest  # noqa: E402


@pytest.mark.parametrize(
    "variable", ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH", "PYTHONSTARTUP", "BASH_ENV", "ENV"]
)
def test_loader_and_interpreter_hooks_are_denied_by_default(make_session: Make, variable: str) -> None:
    """Attack: spec.env LD_PRELOAD / PYTHONPATH / BASH_ENV run the tenant's code inside every process of
    the sandbox's runtime, with no policy needed to allow it."""
    from agentsession_operator.decisions import policy_violations

    session = make_session(spec={"warmPoolRef": {"name": "p"}, "env": [{"name": variable, "value": "/tmp/x"}]})
    assert any(variable in v and "denied" in v for v in policy_violations.violations(session))


def test_ordinary_env_still_allowed(make_session: Make) -> None:
    from agentsession_operator.decisions import policy_violations

    session = make_session(spec={"warmPoolRef": {"name": "p"}, "env": [{"name": "OPENAI_MODEL", "value": "x"}]})
    assert policy_violations.violations(session) == []


@pytest.mark.parametrize("key", ["extensions.agents.x-k8s.io/x", "a.agentsession.dev/session-uid"])
def test_reserved_label_subdomains_are_refused(make_session: Make, key: str) -> None:
    """Attack: `extensions.agents.x-k8s.io/x` slipped past a check that compared prefixes, not domains."""
    from agentsession_api import cel_rules
    from agentsession_operator.decisions import policy_violations

    session = make_session(spec={"warmPoolRef": {"name": "p"}, "labels": {key: "v"}})
    assert any(key in v and "reserved" in v for v in policy_violations.violations(session))
    rule = cel_rules.unreserved_label_keys("spec.labels")["rule"]
    assert "matches(" in rule and "startsWith(" not in rule


# --- 9b: policies restrict pod annotations, storage classes and PVC annotations -------------------------
def volume(name: str, storage_class: str | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {"requests": {"storage": "1Gi"}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    meta: dict[str, Any] = {"name": name}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec}


RESTRICTIVE = {
    "limits": {
        "podAnnotations": {"deny": ["sidecar.istio.io/*", "*.linkerd.io/*"]},
        "allowedStorageClasses": ["standard"],
        "volumeAnnotations": {"allow": ["backup.example.com/*"]},
    }
}


def test_policy_denies_mesh_opt_out_annotation(make_session: Make, make_policy: Make) -> None:
    """Attack: `sidecar.istio.io/inject: "false"` took the sandbox out of the mesh's egress control."""
    from agentsession_operator.decisions import policy_merge, policy_violations

    effective = policy_merge.merge_policies([make_policy("p", spec=RESTRICTIVE)])
    session = make_session(
        spec={"warmPoolRef": {"name": "p"}, "podAnnotations": {"sidecar.istio.io/inject": "false", "note": "x"}}
    )
    found = policy_violations.violations(session, effective)
    assert len(found) == 1 and "sidecar.istio.io/inject" in found[0] and "(AgentSessionPolicy p)" in found[0]


def test_policy_restricts_storage_classes_and_volume_annotations(make_session: Make, make_policy: Make) -> None:
    """Attack: a PVC on an unencrypted or retained storage class, or annotated for another provisioner."""
    from agentsession_operator.decisions import policy_merge, policy_violations

    effective = policy_merge.merge_policies([make_policy("p", spec=RESTRICTIVE)])
    fine = make_session(
        spec={
            "warmPoolRef": {"name": "p"},
            "volumeClaimTemplates": [volume("a", "standard", {"backup.example.com/daily": "y"})],
        }
    )
    assert policy_violations.violations(fine, effective) == []
    bad = make_session(
        spec={
            "warmPoolRef": {"name": "p"},
            "volumeClaimTemplates": [
                volume("a", "fast-retain"),
                volume("b", None, {"volume.beta.kubernetes.io/x": "y"}),
            ],
        }
    )
    found = policy_violations.violations(bad, effective)
    assert any("storageClassName fast-retain" in v for v in found), found
    assert any("the cluster default storage class" in v for v in found), found
    assert any("volume.beta.kubernetes.io/x" in v for v in found), found


def test_schema_carries_the_new_policy_fields() -> None:
    from agentsession_api.types import AgentSessionPolicySpec

    parsed = AgentSessionPolicySpec.model_validate(RESTRICTIVE)
    assert parsed.model_dump(by_alias=True, exclude_none=True)["limits"] == RESTRICTIVE["limits"]


# --- 3: a running session that breaks a policy is stopped, and PolicyCompliant is always current -------
def test_running_session_that_violates_a_policy_is_suspended_not_deleted(
    make_session: Make, make_claim: Make, make_sandbox: Make
) -> None:
    """Attack: a session reconciled before its policy arrived kept a claim with a forbidden env, and
    PolicyCompliant stayed True (violations were only checked while no claim existed)."""
    from agentsession_api import phases
    from agentsession_operator.decisions import actions as decide
    from agentsession_operator.decisions.conditions import find_condition

    claim = make_claim(sandbox_name="demo", ready=("True", "DependenciesReady", "Pod is Ready"), pod_ips=["127.1.0.5"])
    own = resolve(make_session())
    compliant = compute_status(make_session(), claim, make_sandbox(), T0, resolved=own, violations=[])
    session = make_session(status=compliant)
    found = ["spec.env AWS_SECRET is denied by the pattern AWS_* (AgentSessionPolicy p)"]
    acts = decide.reconcile_actions(session, claim, make_sandbox(), T0 + timedelta(seconds=5), violations=found)
    assert not any(isinstance(a, decide.DeleteClaim) for a in acts)
    assert any(isinstance(a, decide.PatchSandbox) and a.patch["spec"]["operatingMode"] == "Suspended" for a in acts)
    status = next(a.patch for a in acts if isinstance(a, decide.PatchStatus))
    assert status["phase"] == "Failed"
    failed = find_condition(status["conditions"], phases.COND_FAILED) or {}
    assert failed.get("reason") == phases.REASON_POLICY_VIOLATION
    compliant_cond = find_condition(status["conditions"], phases.COND_POLICY_COMPLIANT) or {}
    assert compliant_cond.get("status") == "False" and "AWS_SECRET" in compliant_cond.get("message", "")
    # The policy is fixed: the session recovers (Failed by policy is not sticky) and resumes.
    suspended = make_sandbox(mode="Suspended")  # its Pod gone: agent-sandbox reports Suspended=True
    suspended["status"] = {"conditions": [{"type": "Suspended", "status": "True", "reason": "PodTerminated"}]}
    again = decide.reconcile_actions(make_session(status=status), claim, suspended, T0, violations=[])
    assert any(isinstance(a, decide.PatchSandbox) and a.patch["spec"]["operatingMode"] == "Running" for a in again)


def test_running_session_over_a_lowered_max_ttl_is_capped_not_stopped(make_session: Make, make_policy: Make) -> None:
    from agentsession_operator.decisions import policy_merge, policy_violations

    effective = policy_merge.merge_policies([make_policy("p", spec={"limits": {"maxTtl": "1h"}})])
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "ttl": "2h"})
    assert policy_violations.violations(session, effective)  # refused before a claim exists
    assert policy_violations.violations(session, effective, running=True) == []  # capped by resolve() once running


# --- 4: a running session only becomes more constrained ------------------------------------------------
def test_removing_the_selected_label_does_not_lift_the_ttl_cap(make_session: Make, make_policy: Make) -> None:
    """Attack: `kubectl label ags s1 team-` unselected the policy capping the TTL, so spec.ttl (longer)
    applied again. Now the strictest of what applied before (status.resolved) and what applies now wins."""
    from agentsession_operator.decisions import policy, policy_resolve

    capping = make_policy("cap", spec={"selector": {"matchLabels": {"team": "a"}}, "limits": {"maxTtl": "1h"}})
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "ttl": "24h"}, labels={"team": "a"})
    before = policy_resolve.resolve(session, policy.effective_policy_for(session, [capping]))
    assert before.ttl == timedelta(hours=1)
    status = {
        "resolved": before.to_status(),
        "conditions": [{"type": "ClaimCreated", "status": "True", "reason": "ClaimExists", "message": ""}],
    }
    unlabelled = make_session(spec={"warmPoolRef": {"name": "p"}, "ttl": "24h"}, labels={}, status=status)
    after = policy_resolve.resolve(unlabelled, policy.effective_policy_for(unlabelled, [capping]))
    assert after.ttl == timedelta(hours=1)


# --- 2: run locally, the operator listens on loopback only --------------------------------------------
def test_operator_binds_loopback_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attack: run locally (make dev), the webhook, metrics and health ports answered on every address of
    the machine. The Deployment asks for 0.0.0.0 explicitly (config/manager/deployment.yaml)."""
    from agentsession_operator import cli
    from agentsession_operator.admission import server as webhook_server
    from agentsession_operator.infra import metrics

    monkeypatch.delenv("BIND_ADDRESS", raising=False)
    args = cli.parse_args([])
    assert args.bind == "127.0.0.1"
    assert args.webhook_config().bind == "127.0.0.1"
    assert webhook_server.WebhookConfig().bind == "127.0.0.1"
    import inspect

    assert inspect.signature(metrics.serve).parameters["addr"].default == "127.0.0.1"


# --- 2: who may call the webhook ----------------------------------------------------------------------
def test_webhook_client_certificate_is_required_when_configured(tmp_path: Any) -> None:
    """With --webhook-client-ca the server requires a client certificate from that CA in the handshake
    (kopf's verify_mode/verify_cafile); --webhook-client-name narrows it to the API server's name."""
    import ssl

    from agentsession_operator import cli
    from agentsession_operator.admission import server as webhook_server

    ca = tmp_path / "client-ca.crt"
    ca.write_bytes(webhook_server.issue(["client-ca"]).ca)
    args = cli.parse_args(["--webhook-client-ca", str(ca), "--webhook-client-name", "kube-apiserver-webhook-client"])
    config = args.webhook_config()
    assert config.client_ca == str(ca) and config.client_names == ("kube-apiserver-webhook-client",)
    server = webhook_server.build_server(config)
    assert server.verify_mode == ssl.CERT_REQUIRED and server.verify_cafile == str(ca)
    plain = webhook_server.build_server(cli.parse_args([]).webhook_config())
    assert plain.verify_mode is None and plain.verify_cafile is None  # off unless asked for

    apiserver = {"subject": ((("commonName", "kube-apiserver-webhook-client"),),)}
    stranger = {"subject": ((("commonName", "tenant-b"),),), "subjectAltName": (("DNS", "x.example"),)}
    assert webhook_server.caller_refusal(config, apiserver) is None
    assert webhook_server.caller_refusal(config, stranger) is not None
    assert webhook_server.caller_refusal(config, {}) is not None
    assert webhook_server.caller_refusal(webhook_server.WebhookConfig(client_ca=str(ca)), stranger) is None
    with pytest.raises(SystemExit):
        cli.parse_args(["--webhook-client-name", "x"])  # a name without the CA would check nothing


# --- AgentSessionPolicy status: Valid and matchedSessions are written ---------------------------------
def test_policy_status_reports_an_invalid_regex_and_what_it_matches(make_session: Make, make_policy: Make) -> None:
    """Argo CD and Flux read health from status: a policy whose pattern RE2 refuses shows Valid=False."""
    from agentsession_operator.decisions import policy

    bad = make_policy("p", spec={"selector": {"matchLabels": {"team": "a"}}, "labels": {"values": {"team": "(a)\\1"}}})
    bad["metadata"]["generation"] = 3
    sessions = [make_session("s1", labels={"team": "a"}), make_session("s2", labels={"team": "b"})]
    status = policy.policy_status(bad, sessions, T0)
    assert status["observedGeneration"] == 3 and status["matchedSessions"] == 1
    valid = status["conditions"][0]
    assert valid["type"] == "Valid" and valid["status"] == "False" and valid["reason"] == "InvalidSpec"
    assert "spec.labels.values[team]" in valid["message"] and "not a valid regular expression" in valid["message"]
    good = policy.policy_status(make_policy("q", spec={}), sessions, T0)
    assert good["matchedSessions"] == 2 and good["conditions"][0]["status"] == "True"
