"""admission.review: the reconciler's policy sentences, decided at CREATE/UPDATE time."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncGenerator, Callable
from typing import Any, cast

import kopf
import pytest

from agentsession_operator.admission import handler as admission_handler
from agentsession_operator.admission import rules as admission
from agentsession_operator.admission import server as webhook
from agentsession_operator.decisions.policy import effective_policy_for
from agentsession_operator.decisions.policy_violations import violations
from agentsession_operator.decisions.selectors import namespace_matches
from agentsession_operator.handlers.state import OperatorState
from agentsession_operator.kube.places import Admitted
from agentsession_operator.settings import OperatorSettings

Make = Callable[..., dict[str, Any]]
DOMAINS = ["sandbox.users.io"]

POLICY_SPEC: dict[str, Any] = {
    "defaults": {"ttl": "30m", "idleTimeout": "10m"},
    "limits": {
        "maxTtl": "1h",
        "maxIdleTimeout": "20m",
        "allowedWarmPools": ["pool"],
        "maxStorage": "10Gi",
        "env": {"deny": ["AWS_*"]},
    },
    "labels": {"required": ["team"], "values": {"team": "^(a|b)$"}, "allowedPrefixes": ["sandbox.users.io/"]},
    "cleanup": {"maxSessionsPerLabel": {"key": "team", "max": 2}},
}


@pytest.fixture
def policies(make_policy: Make) -> list[dict[str, Any]]:
    return [
        make_policy("rules", copy.deepcopy(POLICY_SPEC)),
        make_policy("elsewhere", {"limits": {"maxTtl": "1s"}}, namespace="other"),
    ]


def good(make_session: Make, name: str = "s", team: str = "a", **spec: Any) -> dict[str, Any]:
    return make_session(name, spec={"warmPoolRef": {"name": "pool"}, **spec}, labels={"team": team}, uid=f"uid-{name}")


def running(make_session: Make, name: str, team: str, phase: str = "Ready") -> dict[str, Any]:
    session = good(make_session, name, team)
    session["status"] = {"phase": phase}
    return session


def create(
    session: dict[str, Any], policies: list[dict[str, Any]], others: list[dict[str, Any]] | None = None
) -> list[str]:
    return admission.review(session, policies, DOMAINS, others or [], "CREATE")


def test_compliant_session_is_admitted(make_session: Make, policies: list[dict[str, Any]]) -> None:
    assert create(good(make_session), policies) == []
    assert create(good(make_session, ttl="1h", idleTimeout="20m"), policies) == []


def test_no_policy_no_refusal_except_agent_sandbox_rules(make_session: Make) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "x"}, "ttl": "100h", "env": [{"name": "AWS_KEY"}]})
    assert create(session, []) == []
    bad_label = make_session(spec={"warmPoolRef": {"name": "x"}, "podLabels": {"example.com/team": "a"}})
    (message,) = create(bad_label, [])
    assert "spec.podLabels" in message and "example.com/team" in message and "sandbox.users.io" in message


@pytest.mark.parametrize(
    ("spec", "labels", "expected"),
    [
        ({"ttl": "2h"}, {"team": "a"}, ["spec.ttl 2h exceeds the policy maximum 1h (AgentSessionPolicy rules)"]),
        ({"idleTimeout": "1h"}, {"team": "a"}, ["spec.idleTimeout 1h exceeds the policy maximum 20m"]),
        ({"warmPoolRef": {"name": "big"}}, {"team": "a"}, ["spec.warmPoolRef.name big is not an allowed warm pool"]),
        (
            {"env": [{"name": "AWS_SECRET", "value": "x"}]},
            {"team": "a"},
            ["spec.env AWS_SECRET is denied by the pattern AWS_*"],
        ),
        ({}, {}, ["metadata.labels is missing the required label team"]),
        ({}, {"team": "c"}, ["metadata.labels team=c does not match the pattern ^(a|b)$"]),
        ({"labels": {"x/y": "1"}}, {"team": "a"}, ["spec.labels key x/y does not start with an allowed prefix"]),
        (
            {
                "volumeClaimTemplates": [
                    {"metadata": {"name": "w"}, "spec": {"resources": {"requests": {"storage": "20Gi"}}}}
                ]
            },
            {"team": "a"},
            ["spec.volumeClaimTemplates request 20Gi in total, more than the policy maximum 10Gi"],
        ),
        ({"podAnnotations": {"kubernetes.io/x": "1"}}, {"team": "a"}, ['spec.podAnnotations key "kubernetes.io/x"']),
    ],
    ids=[
        "maxTtl",
        "maxIdleTimeout",
        "allowedWarmPools",
        "env.deny",
        "required",
        "values",
        "prefixes",
        "maxStorage",
        "annotations",
    ],
)
def test_each_rule_class_refuses_with_its_sentence(
    make_session: Make,
    policies: list[dict[str, Any]],
    spec: dict[str, Any],
    labels: dict[str, str],
    expected: list[str],
) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "pool"}, **spec}, labels=labels)
    found = create(session, policies)
    assert len(found) == len(expected), found
    for sentence, start in zip(found, expected, strict=True):
        assert sentence.startswith(start), sentence


def test_every_violation_is_reported_and_matches_the_reconciler(
    make_session: Make, policies: list[dict[str, Any]]
) -> None:
    session = make_session(
        spec={"warmPoolRef": {"name": "big"}, "ttl": "3h", "env": [{"name": "AWS_SECRET", "value": "x"}]},
        labels={"team": "c"},
    )
    found = create(session, policies)
    assert found == violations(session, effective_policy_for(session, policies), DOMAINS)
    assert len(found) == 4
    message = admission.refusal_message(found)
    assert message.startswith("AgentSession refused by AgentSessionPolicy: spec.warmPoolRef.name big")
    assert message.count("; ") == 3


def test_label_domains_are_agent_sandbox_allowlist(make_session: Make) -> None:
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "podLabels": {"corp.io/team": "a"}})
    assert admission.review(session, [], ["corp.io"], [], "CREATE") == []
    assert admission.review(session, [], ["sandbox.users.io"], [], "CREATE")


def test_policy_selector_and_namespace_apply(make_session: Make, make_policy: Make) -> None:
    only_gpu = make_policy("gpu", {"selector": {"matchLabels": {"tier": "gpu"}}, "limits": {"maxTtl": "1h"}})
    session = make_session(spec={"warmPoolRef": {"name": "p"}, "ttl": "2h"}, labels={"tier": "cpu"})
    assert create(session, [only_gpu]) == []
    session["metadata"]["labels"]["tier"] = "gpu"
    assert create(session, [only_gpu])
    elsewhere = make_policy("x", {"limits": {"maxTtl": "1h"}}, namespace="other")
    assert create(session, [elsewhere]) == []


def test_max_sessions_per_label_counts_unfinished_others(make_session: Make, policies: list[dict[str, Any]]) -> None:
    new = good(make_session, "third", "a")
    others = [running(make_session, "one", "a"), running(make_session, "two", "a", phase="Pending")]
    (message,) = create(new, policies, others)
    assert message == (
        "2 unfinished AgentSessions already carry team=a (one, two); the policy maximum is 2 (AgentSessionPolicy "
        "rules); one of them must be deleted or finish first"
    )
    # A session waiting for a slot (Failed, PolicyViolation) holds its place: it proceeds when one frees.
    waiting = running(make_session, "two", "a", "Failed")
    waiting["status"]["conditions"] = [{"type": "Failed", "status": "True", "reason": "PolicyViolation"}]
    assert create(new, policies, [others[0], waiting])
    # Finished ones, other values, other namespaces and the session itself do not count.
    failed = running(make_session, "two", "a", "Failed")
    failed["status"]["conditions"] = [{"type": "Failed", "status": "True", "reason": "InvalidMetadata"}]
    finished = [running(make_session, "one", "a", "Expired"), failed]
    assert create(new, policies, [*finished, others[0]]) == []
    assert create(new, policies, [others[0], running(make_session, "b1", "b")]) == []
    foreign = running(make_session, "far", "a")
    foreign["metadata"]["namespace"] = "other"
    assert create(new, policies, [others[0], foreign]) == []
    assert create(new, policies, [others[0], copy.deepcopy(new)]) == []


def test_count_limit_skipped_on_update(make_session: Make, policies: list[dict[str, Any]]) -> None:
    session = good(make_session, "three", "a")
    others = [running(make_session, "one", "a"), running(make_session, "two", "a")]
    changed = copy.deepcopy(session)
    changed["spec"]["ttl"] = "45m"
    assert admission.review(changed, policies, DOMAINS, others, "UPDATE", old=session) == []


def test_update_refuses_only_what_the_change_introduces(make_session: Make, policies: list[dict[str, Any]]) -> None:
    stored = good(make_session, ttl="2h")  # over maxTtl already (say the policy was lowered later)
    touched = copy.deepcopy(stored)
    touched["metadata"]["annotations"] = {"agentsession.dev/activity": "2025-01-01T12:00:00Z busy=0"}
    assert admission.review(touched, policies, DOMAINS, [], "UPDATE", old=stored) == []
    assert admission.standing_violations(touched, policies, DOMAINS, stored) == [
        "spec.ttl 2h exceeds the policy maximum 1h (AgentSessionPolicy rules)"
    ]
    longer = copy.deepcopy(stored)
    longer["spec"]["ttl"] = "3h"
    assert admission.review(longer, policies, DOMAINS, [], "UPDATE", old=stored) == [
        "spec.ttl 3h exceeds the policy maximum 1h (AgentSessionPolicy rules)"
    ]
    relabelled = copy.deepcopy(stored)
    relabelled["metadata"]["labels"] = {"team": "z"}
    assert admission.review(relabelled, policies, DOMAINS, [], "UPDATE", old=stored) == [
        "metadata.labels team=z does not match the pattern ^(a|b)$ (AgentSessionPolicy rules)"
    ]
    dropped = copy.deepcopy(stored)
    dropped["metadata"]["labels"] = {}
    found = admission.review(dropped, policies, DOMAINS, [], "UPDATE", old=stored)
    assert found == ["metadata.labels is missing the required label team (AgentSessionPolicy rules)"]
    # Without the stored object every violation counts.
    assert len(admission.review(longer, policies, DOMAINS, [], "UPDATE")) == 1


def test_deleting_and_other_operations_are_never_refused(make_session: Make, policies: list[dict[str, Any]]) -> None:
    bad = make_session(spec={"warmPoolRef": {"name": "big"}}, labels={})
    assert create(bad, policies)
    assert admission.review(bad, policies, DOMAINS, [], "DELETE") == []
    assert admission.review(bad, policies, DOMAINS, [], "CONNECT") == []
    deleting = make_session(spec={"warmPoolRef": {"name": "big"}}, labels={}, deleting=True)
    assert admission.review(deleting, policies, DOMAINS, [], "UPDATE", old=bad) == []


def test_counted_groups(make_session: Make, policies: list[dict[str, Any]]) -> None:
    assert admission.counted_groups(good(make_session), policies, "CREATE") == [("team", "a")]
    assert admission.counted_groups(make_session(labels={}), policies, "CREATE") == []
    assert admission.counted_groups(good(make_session), [], "CREATE") == []
    assert admission.counted_groups(good(make_session), policies, "UPDATE", good(make_session)) == []
    assert admission.counted_groups(good(make_session), policies, "UPDATE", good(make_session, team="b")) == [
        ("team", "a")
    ]


# ---- webhook plumbing that needs no server ---------------------------------------------------------
def test_parse_service() -> None:
    assert webhook.parse_service("agentsession-system/agentsession-operator") == (
        "agentsession-system",
        "agentsession-operator",
        443,
    )
    assert webhook.parse_service("ns/svc:8443") == ("ns", "svc", 8443)
    for bad in ("svc", "/svc", "ns/"):
        with pytest.raises(ValueError):
            webhook.parse_service(bad)


def test_server_names_and_url_host() -> None:
    assert webhook.WebhookConfig(bind="0.0.0.0").url_host() == "127.0.0.1"
    assert webhook.WebhookConfig(bind="127.0.0.1", host="op.example").server_names() == ["op.example", "127.0.0.1"]
    names = webhook.WebhookConfig(bind="0.0.0.0", service=("ns", "svc", 443)).server_names()
    assert names[:3] == ["svc.ns.svc", "svc.ns.svc.cluster.local", "svc.ns"] and "127.0.0.1" in names
    assert not webhook.WebhookConfig(port=0).enabled


def test_self_signed_certificate_verifies_for_its_names(tmp_path: Any) -> None:
    import ssl

    cert, key, ca = webhook.self_signed(tmp_path, ["127.0.0.1", "svc.ns.svc"])
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)  # the pair matches
    from cryptography import x509

    leaf = x509.load_pem_x509_certificate(cert.read_bytes())
    authority = x509.load_pem_x509_certificate(ca.read_bytes())
    leaf.verify_directly_issued_by(authority)
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert sans.get_values_for_type(x509.DNSName) == ["svc.ns.svc"]
    assert key.stat().st_mode & 0o077 == 0


def test_configure_sets_server_and_managed_configuration() -> None:
    settings = kopf.OperatorSettings()
    webhook.configure(settings, None)
    assert settings.admission.server is None and settings.admission.managed is None
    webhook.configure(settings, webhook.WebhookConfig(port=0))
    assert settings.admission.server is None
    webhook.configure(settings, webhook.WebhookConfig(port=9999, bind="127.0.0.1"))
    server = settings.admission.server
    assert isinstance(server, kopf.WebhookServer) and server.port == 9999 and server.host == "127.0.0.1"
    assert server.cafile and server.certfile and server.pkeyfile
    assert settings.admission.managed is None  # the configuration is shipped, never kopf's
    webhook.configure(settings, webhook.WebhookConfig(port=9443, service=("ns", "svc", 443)))
    assert isinstance(settings.admission.server, webhook.PublishingWebhookServer)


def test_ensure_port_free_refuses_a_taken_port() -> None:
    import socket

    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # as kopf binds
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError):
            webhook.ensure_port_free(webhook.WebhookConfig(port=port, bind="127.0.0.1"))
    webhook.ensure_port_free(webhook.WebhookConfig(port=port, bind="127.0.0.1"))
    webhook.ensure_port_free(webhook.WebhookConfig(port=0))


async def test_service_server_announces_a_service_client_config(tmp_path: Any) -> None:
    import base64
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = webhook.WebhookConfig(port=port, bind="127.0.0.1", service=("agentsession-system", "op", 443))
    server = webhook.build_server(config)
    assert isinstance(server, webhook.PublishingWebhookServer)

    async def never(*_: Any, **__: Any) -> Any:
        raise AssertionError("no request expected")

    stream = cast(AsyncGenerator[Any, None], server(never))
    try:
        client_config = await anext(stream)
    finally:
        await stream.aclose()
    assert client_config["service"] == {"namespace": "agentsession-system", "name": "op", "port": 443}
    assert "url" not in client_config
    assert base64.b64decode(client_config["caBundle"]).startswith(b"-----BEGIN CERTIFICATE-----")


async def test_every_review_closes_its_connection(tmp_path: Any) -> None:
    """The API server must not keep a connection a stopping replica may close under its next POST (EOF,
    which Go does not resend: CI's upgrade test had a create refused that way). An answer and a refusal
    (kopf's 400 for a body that is not JSON) both say ``Connection: close``, and the server hangs up."""
    import base64
    import http.client
    import socket
    import ssl

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = webhook.build_server(webhook.WebhookConfig(port=port, bind="127.0.0.1"))

    async def allow(request: Any, **_: Any) -> Any:
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"allowed": True}}

    def post(body: bytes) -> tuple[int, str | None, bytes]:
        context = ssl.create_default_context(cadata=base64.b64decode(client_config["caBundle"]).decode())
        context.check_hostname = False
        connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        try:
            connection.request("POST", "/policy", body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            answer = (response.status, response.getheader("Connection"), response.read())
            assert connection.sock is None or connection.sock.recv(1) == b"", "the server kept the connection"
            return answer
        finally:
            connection.close()

    stream = cast(AsyncGenerator[Any, None], server(allow))
    try:
        client_config = await anext(stream)
        review = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u"}}'
        ok = await asyncio.to_thread(post, review)
        refused = await asyncio.to_thread(post, b"not json")
    finally:
        await stream.aclose()
    assert ok[:2] == (200, "close") and b'"allowed": true' in ok[2]
    assert refused[:2] == (400, "close")


class FakeKube:
    def __init__(self, sessions: list[dict[str, Any]], fail: bool = False) -> None:
        self.sessions, self.fail = sessions, fail
        self.selectors: list[str | None] = []

    async def list_sessions(self, namespace: str | None = None, selector: str | None = None) -> list[dict[str, Any]]:
        self.selectors.append(selector)
        if self.fail:
            raise RuntimeError("API down")
        key, _, value = (selector or "").partition("=")
        return [s for s in self.sessions if (s["metadata"].get("labels") or {}).get(key) == value]


class FakeReconciler:
    def __init__(self, policies: list[dict[str, Any]], kube: FakeKube) -> None:
        from agentsession_operator.kube.cache import Cache

        self.cache = Cache()
        for p in policies:
            self.cache.policies[p["metadata"]["namespace"]][p["metadata"]["name"]] = p
        self.kube = kube
        self.admitted = Admitted()  # every namespace is capped (the operator's default): admission reads places

    async def label_domains(self) -> list[str]:
        return DOMAINS

    def caches(self, namespace: str) -> bool:  # Reconciler.caches: one replica, every namespace its own
        return True


def as_body(obj: dict[str, Any]) -> Any:
    return kopf.Body(cast(kopf.RawBody, obj))


def memo_for(reconciler: Any, namespaces: tuple[str, ...] = ()) -> Any:
    return kopf.Memo(state=OperatorState(OperatorSettings(namespace=namespaces), reconciler=reconciler))


async def test_handler_refuses_with_422_and_every_sentence(make_session: Make, policies: list[dict[str, Any]]) -> None:
    memo = memo_for(FakeReconciler(policies, FakeKube([])))
    bad = make_session(spec={"warmPoolRef": {"name": "big"}, "ttl": "2h"}, labels={"team": "a"})
    with pytest.raises(kopf.AdmissionError) as err:
        await admission_handler.validate_session(body=as_body(bad), memo=memo, warnings=[], operation="CREATE")
    assert err.value.code == 422
    assert str(err.value).startswith("AgentSession refused by AgentSessionPolicy: spec.warmPoolRef.name big")
    assert "; spec.ttl 2h exceeds the policy maximum 1h" in str(err.value)
    await admission_handler.validate_session(
        body=as_body(good(make_session)), memo=memo, warnings=[], operation="CREATE"
    )


async def test_handler_counts_sessions_live_and_falls_back_to_the_cache(
    make_session: Make, policies: list[dict[str, Any]]
) -> None:
    stored = [running(make_session, "one", "a"), running(make_session, "two", "a")]
    kube = FakeKube(stored)
    memo = memo_for(FakeReconciler(policies, kube))
    third = as_body(good(make_session, "three", "a"))
    with pytest.raises(kopf.AdmissionError, match="2 unfinished AgentSessions already carry team=a"):
        await admission_handler.validate_session(body=third, memo=memo, warnings=[], operation="CREATE")
    assert kube.selectors == ["team=a"]
    # The API failing: the reconciler's cache decides (empty here, so admitted).
    memo = memo_for(FakeReconciler(policies, FakeKube(stored, fail=True)))
    await admission_handler.validate_session(body=third, memo=memo, warnings=[], operation="CREATE")


async def test_handler_refuses_on_internal_errors_and_warns_on_standing_violations(
    make_session: Make, policies: list[dict[str, Any]]
) -> None:
    """Attack (issue 49 item 6): a write that breaks a policy, made while the check itself breaks (here the
    label allowlist cannot be read), was admitted with a warning, and some rules have no reconcile backstop.
    Now the webhook fails closed: refused, saying the check failed and that a retry is the way on."""

    class Broken(FakeReconciler):
        async def label_domains(self) -> list[str]:
            raise RuntimeError("boom")

    warnings: list[str] = []
    bad = as_body(make_session(spec={"warmPoolRef": {"name": "big"}}, labels={}))
    with pytest.raises(kopf.AdmissionError) as refused:
        await admission_handler.validate_session(
            body=bad, memo=memo_for(Broken(policies, FakeKube([]))), warnings=warnings, operation="CREATE"
        )
    assert refused.value.code == 500, refused.value.code
    assert "AgentSessionPolicy could not be checked (RuntimeError: boom)" in str(refused.value), str(refused.value)
    assert "try again" in str(refused.value)

    stored = good(make_session, ttl="2h")
    touched = copy.deepcopy(stored)
    touched["metadata"]["annotations"] = {"agentsession.dev/activity": "x"}
    warnings = []
    memo = memo_for(FakeReconciler(policies, FakeKube([])))
    await admission_handler.validate_session(
        body=as_body(touched), old=as_body(stored), memo=memo, warnings=warnings, operation="UPDATE"
    )
    assert warnings == [
        "AgentSessionPolicy (not enforced on this update): spec.ttl 2h exceeds the policy maximum 1h "
        "(AgentSessionPolicy rules)"
    ]


async def test_handler_ignores_namespaces_the_operator_does_not_watch(
    make_session: Make, policies: list[dict[str, Any]]
) -> None:
    bad = as_body(make_session(spec={"warmPoolRef": {"name": "big"}}, labels={}))
    memo = memo_for(FakeReconciler(policies, FakeKube([])), namespaces=("team-*",))
    await admission_handler.validate_session(
        body=bad, memo=memo, warnings=[], operation="CREATE"
    )  # "ns" is not watched
    memo = memo_for(FakeReconciler(policies, FakeKube([])), namespaces=("team-*, !team-x", "n*"))
    with pytest.raises(kopf.AdmissionError):
        await admission_handler.validate_session(body=bad, memo=memo, warnings=[], operation="CREATE")


@pytest.mark.parametrize(
    ("namespace", "pattern", "expected"),
    [
        ("myapp-test", "myapp-*, !*-pr-*, *pr-123", True),
        ("myapp-pr-123", "myapp-*, !*-pr-*, *pr-123", True),
        ("myapp-pr-456", "myapp-*, !*-pr-*, *pr-123", False),
        ("otherapp-pr-123", "myapp-*, !*-pr-*, *pr-123", False),
        ("otherapp-pr-123", "!*-pr-*, *pr-123", True),
        ("anyapp", "!*-pr-*", True),
    ],
)
def test_namespace_patterns_follow_kopf(namespace: str, pattern: str, expected: bool) -> None:
    """The operator's --namespace patterns, matched like kopf matches them (its own matcher is private)."""
    assert namespace_matches(namespace, pattern) is expected


def test_accessible_host() -> None:
    assert webhook.accessible_host("0.0.0.0") == "127.0.0.1"
    assert webhook.accessible_host("::") == "::1"
    assert webhook.accessible_host("127.0.0.7") == "127.0.0.7"
    assert webhook.accessible_host("op.example") == "op.example"


# ---- issue 11 item 4 (admission half): a session may only become more constrained --------------------
def test_leaving_a_policy_by_a_label_change_is_refused(make_session: Make, make_policy: Make) -> None:
    """Attack: `kubectl label ags s1 team-` took the session out of the policy that capped its TTL."""
    cap = make_policy("cap", {"selector": {"matchLabels": {"team": "a"}}, "limits": {"maxTtl": "1h"}})
    stored = make_session(spec={"warmPoolRef": {"name": "p"}, "ttl": "30m"}, labels={"team": "a", "x": "1"})
    unlabelled = copy.deepcopy(stored)
    del unlabelled["metadata"]["labels"]["team"]
    (message,) = admission.review(unlabelled, [cap], DOMAINS, [], "UPDATE", old=stored)
    assert "AgentSessionPolicy cap" in message and "team" in message, message
    assert "restore" in message and "team=a" in message, message  # says what to fix
    relabelled = copy.deepcopy(stored)
    relabelled["metadata"]["labels"]["team"] = "b"
    assert admission.review(relabelled, [cap], DOMAINS, [], "UPDATE", old=stored)
    # Changes that keep every policy that applied are not refused: another label, or joining a policy.
    other = copy.deepcopy(stored)
    other["metadata"]["labels"]["x"] = "2"
    assert admission.review(other, [cap], DOMAINS, [], "UPDATE", old=stored) == []
    joined = make_session(spec={"warmPoolRef": {"name": "p"}, "ttl": "30m"}, labels={})
    assert admission.review(stored, [cap], DOMAINS, [], "UPDATE", old=joined) == []
    # matchExpressions are read as well: NotIn loosens when the value moves into the excluded set.
    not_b = make_policy(
        "not-b", {"selector": {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["b"]}]}}
    )
    (message,) = admission.review(relabelled, [not_b], DOMAINS, [], "UPDATE", old=stored)
    assert "AgentSessionPolicy not-b" in message and "team" in message, message
    # Deleting and CREATE are unaffected.
    deleting = copy.deepcopy(unlabelled)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert admission.review(deleting, [cap], DOMAINS, [], "UPDATE", old=stored) == []
    assert admission.review(unlabelled, [cap], DOMAINS, [], "CREATE") == []


def test_kopf_never_creates_nor_deletes_webhook_configurations() -> None:
    """Item 10. Attack: kopf's managed mode created the configuration at start and removed its webhooks at
    every clean shutdown, so each restart or rollout switched admission off. Now kopf only serves; the
    configuration is shipped (config/) and the operator patches its clientConfig and caBundle."""
    settings = kopf.OperatorSettings()
    webhook.configure(settings, webhook.WebhookConfig(port=9999, bind="127.0.0.1"))
    assert isinstance(settings.admission.server, kopf.WebhookServer)
    assert settings.admission.managed is None


def test_configuration_patch_sets_client_config_by_webhook_name() -> None:
    hooks = {"policy.agentsession.dev": "policy"}
    service = {"service": {"namespace": "ns", "name": "op", "port": 443}, "caBundle": "Q0E="}
    assert webhook.configuration_patch(service, hooks) == {
        "webhooks": [
            {
                "name": "policy.agentsession.dev",
                "clientConfig": {
                    "service": {"namespace": "ns", "name": "op", "port": 443, "path": "/policy"},
                    "url": None,  # a URL and a Service exclude each other
                    "caBundle": "Q0E=",
                },
            }
        ]
    }
    (hook,) = webhook.configuration_patch({"url": "https://127.0.0.1:9443/"}, hooks, ca_bundle=b"CA")["webhooks"]
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:9443/policy", "service": None, "caBundle": "Q0E="}


def test_cert_bundle_round_trips_through_the_secret_and_is_checked() -> None:
    import datetime as dt

    now = dt.datetime.now(dt.UTC)
    names = ["op.ns.svc", "127.0.0.1"]
    bundle = webhook.issue(names)
    again = webhook.CertBundle.from_secret_data(bundle.secret_data())
    assert again == bundle
    assert webhook.unusable(again, names, now) is None
    assert webhook.CertBundle.from_secret_data({}) is None  # the shipped, empty Secret
    assert webhook.unusable(None, names, now) == "no certificate yet"
    assert webhook.unusable(bundle, ["other.ns.svc"], now) == "does not name other.ns.svc"
    assert "expires" in (webhook.unusable(bundle, names, now + dt.timedelta(days=340)) or "")
    # A renewal keeps the previous CA in the bundle (a replica with the old certificate stays trusted).
    renewed = webhook.issue(names, previous_ca=bundle.ca)
    assert renewed.ca.count(b"BEGIN CERTIFICATE") == 2 and renewed.ca.endswith(bundle.ca)


class FakeSecrets:
    """One Secret with a resourceVersion: a write at a stale version loses (409), as in the API server."""

    def __init__(self, data: dict[str, str] | None) -> None:
        self.data, self.version, self.writes = data, 1, 0

    async def get_secret_data(self, namespace: str, name: str) -> tuple[dict[str, str], str] | None:
        import asyncio

        await asyncio.sleep(0)  # let the replicas interleave: all read the empty Secret first
        return None if self.data is None else (dict(self.data), str(self.version))

    async def fill_secret(self, namespace: str, name: str, data: dict[str, str], resource_version: str) -> bool:
        if resource_version != str(self.version):
            return False
        self.data, self.version, self.writes = data, self.version + 1, self.writes + 1
        return True


async def test_replicas_starting_together_share_one_certificate() -> None:
    import asyncio

    from agentsession_operator.admission import certificate as kube_webhook

    secrets = FakeSecrets({})
    names = ["op.ns.svc"]
    got = await asyncio.gather(
        *(kube_webhook.shared_certificate(secrets, "ns", "cert", names, True) for _ in range(3))  # type: ignore[arg-type]
    )
    assert got[0] == got[1] == got[2] and secrets.writes == 1
    # A restart reuses it: no write.
    assert await kube_webhook.shared_certificate(secrets, "ns", "cert", names, True) == got[0]  # type: ignore[arg-type]
    assert secrets.writes == 1
    with pytest.raises(kube_webhook.CertificateUnavailable, match="not found"):
        await kube_webhook.shared_certificate(FakeSecrets(None), "ns", "cert", names, True)  # type: ignore[arg-type]


async def test_publishing_retries_and_never_raises() -> None:
    from agentsession_operator.admission import certificate as kube_webhook

    class Flaky:
        def __init__(self, failures: int, found: bool = True) -> None:
            self.failures, self.found, self.patches = failures, found, []

        async def patch_validating_webhooks(self, name: str, patch: dict[str, Any]) -> bool:
            if self.failures:
                self.failures -= 1
                raise RuntimeError("API down")
            self.patches.append((name, patch))
            return self.found

    hooks = {"policy.agentsession.dev": "policy"}
    flaky = Flaky(2)
    publish = kube_webhook.publisher(flaky, "agentsession.dev", hooks, None, retry_delay=0)  # type: ignore[arg-type]
    await publish({"url": "https://127.0.0.1:1/"})
    assert [name for name, _ in flaky.patches] == ["agentsession.dev"]
    down = Flaky(100)
    await kube_webhook.publisher(down, "agentsession.dev", hooks, None, attempts=3, retry_delay=0)(  # type: ignore[arg-type]
        {"url": "https://127.0.0.1:1/"}
    )
    assert down.patches == []  # gave up quietly: the server keeps serving
    await kube_webhook.publisher(Flaky(0, found=False), "agentsession.dev", hooks, None)(  # type: ignore[arg-type]
        {"url": "https://127.0.0.1:1/"}
    )


# ---- item 4: an UPDATE may only tighten -----------------------------------------------------------
LOOSENINGS: list[tuple[str, dict[str, Any], str]] = [
    ("ttl over maxTtl", {"ttl": "3h"}, "spec.ttl 3h exceeds the policy maximum 1h"),
    ("idle over maxIdleTimeout", {"idleTimeout": "1h"}, "spec.idleTimeout 1h exceeds the policy maximum 20m"),
    ("a label prefix not allowed", {"labels": {"x/y": "1"}}, "spec.labels key x/y does not start with an allowed"),
    (
        "an agent-sandbox pod annotation",
        {"podAnnotations": {"kubernetes.io/x": "1"}},
        'spec.podAnnotations key "kubernetes.io/x"',
    ),
]


@pytest.mark.parametrize(("what", "change", "sentence"), LOOSENINGS, ids=[w for w, _, _ in LOOSENINGS])
def test_an_update_is_refused_with_the_sentence_a_create_gets(
    make_session: Make, policies: list[dict[str, Any]], what: str, change: dict[str, Any], sentence: str
) -> None:
    """One home for the rule: what a CREATE of the changed object is refused for, the UPDATE is too."""
    stored = good(make_session)
    changed = copy.deepcopy(stored)
    changed["spec"].update(change)
    refused = admission.review(changed, policies, DOMAINS, [], "UPDATE", old=stored)
    assert refused and all(sentence in r or "does not start" in r for r in refused), refused
    assert refused == [v for v in create(changed, policies) if "unfinished" not in v]


def _running_since(session: dict[str, Any], **recorded: str) -> dict[str, Any]:
    session["status"] = {
        "phase": "Ready",
        "conditions": [{"type": "ClaimCreated", "status": "True", "reason": "Created", "message": ""}],
        "resolved": recorded,
    }
    return session


def test_an_update_over_the_maxima_recorded_when_the_sandbox_was_made_is_refused(
    make_session: Make, make_policy: Make
) -> None:
    """Attack: the policy that capped a running session's TTL at 1h is loosened (or deleted, or its label
    changed under a policy that still selects it), then `kubectl patch ags s --type=merge -p
    '{"spec":{"ttl":"8h"}}'`. Before: admitted (the current policy allows it) and silently capped at
    reconcile. Now refused: the maxima recorded in status.resolved still hold, as at reconcile."""
    loosened = [make_policy("rules", {"limits": {"maxTtl": "10h"}})]
    stored = _running_since(good(make_session, ttl="30m"), maxTtl="1h", maxIdleTimeout="20m")
    longer = copy.deepcopy(stored)
    longer["spec"]["ttl"] = "8h"
    longer["spec"]["idleTimeout"] = "2h"
    assert admission.review(longer, loosened, DOMAINS, [], "UPDATE", old=stored) == [
        "spec.ttl 8h exceeds the maximum 1h in force for this session since its sandbox was created "
        "(status.resolved.maxTtl): a session's maxima only tighten; delete the session and create it anew for "
        "the new policy's",
        "spec.idleTimeout 2h exceeds the maximum 20m in force for this session since its sandbox was created "
        "(status.resolved.maxIdleTimeout): a session's maxima only tighten; delete the session and create it "
        "anew for the new policy's",
    ]
    within = copy.deepcopy(stored)
    within["spec"]["ttl"] = "45m"
    assert admission.review(within, loosened, DOMAINS, [], "UPDATE", old=stored) == []
    assert admission.review(longer, [], DOMAINS, [], "UPDATE", old=stored)  # no policy at all any more
    # The reconciler caps a running session (expiry moves earlier) rather than stopping it.
    assert violations(longer, effective_policy_for(longer, loosened), DOMAINS, running=True) == []


async def test_a_dry_run_holds_no_place_under_the_namespace_cap(make_session: Make, make_policy: Make) -> None:
    """`kubectl create --dry-run=server` stores nothing: counted as an admitted create, two dry runs filled a
    cap of 2 and refused the first real session (found by tests/e2e/test_namespace_cap.py)."""
    from agentsession_operator.kube.places import Admitted

    cap = make_policy("cap", {"cleanup": {"maxSessionsPerNamespace": 2}})
    reconciler = FakeReconciler([cap], FakeKube([]))
    reconciler.admitted = Admitted()  # type: ignore[attr-defined]
    memo = memo_for(reconciler)
    namespace = cap["metadata"]["namespace"]
    for name in ("probe-1", "probe-2"):
        body = as_body(make_session(name=name, namespace=namespace))
        await admission_handler.validate_session(body=body, memo=memo, warnings=[], operation="CREATE", dryrun=True)
    for name in ("s1", "s2"):  # the two real places
        body = as_body(make_session(name=name, namespace=namespace))
        await admission_handler.validate_session(body=body, memo=memo, warnings=[], operation="CREATE")
    with pytest.raises(kopf.AdmissionError, match="maxSessionsPerNamespace"):
        body = as_body(make_session(name="s3", namespace=namespace))
        await admission_handler.validate_session(body=body, memo=memo, warnings=[], operation="CREATE")


async def test_a_sharded_replica_counts_a_namespaces_places_it_does_not_cache(make_session: Make) -> None:
    """Attack (issue 49 item 2): with --shards, the webhook of a replica that does not hold a namespace's shard
    answered from a cache without that namespace's sessions: it saw no places and admitted every create past
    the cap (the API server sends each review to any replica). Now such a replica counts the namespace's
    places from a live listing."""

    class ListingKube(FakeKube):
        async def list_sessions(
            self, namespace: str | None = None, selector: str | None = None
        ) -> list[dict[str, Any]]:
            self.selectors.append(selector)
            return [s for s in self.sessions if s["metadata"]["namespace"] == namespace]

    class OtherShard(FakeReconciler):
        def caches(self, namespace: str) -> bool:
            return False  # another replica holds this namespace's shard

    held = [
        make_session(name, created=f"2025-01-01T11:0{i}:00Z", status={"phase": "Ready"})
        for i, name in enumerate(("first", "second"))
    ]
    capped = OperatorSettings(max_sessions_per_namespace=2)
    memo = kopf.Memo(state=OperatorState(capped, reconciler=OtherShard([], ListingKube(held))))
    third = as_body(make_session("third", created="2025-01-01T11:05:00Z"))
    with pytest.raises(kopf.AdmissionError) as refused:
        await admission_handler.validate_session(body=third, memo=memo, warnings=[], operation="CREATE")
    assert "2 unfinished AgentSessions already hold a place in namespace ns (first, second)" in str(refused.value)
