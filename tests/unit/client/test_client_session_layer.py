"""The session side of the client, without a cluster: throttling, durations, names, specs, status views."""

from __future__ import annotations

import pytest

from langchain_k8s_client.activity import ActivityThrottle, interval_for
from langchain_k8s_client.durations import normalize, parse_seconds
from langchain_k8s_client.endpoints import EndpointResolver, router_headers
from langchain_k8s_client.errors import PolicyViolation, SessionExpired, SessionFailed
from langchain_k8s_client.manager import session_name
from langchain_k8s_client.sessions import SessionSpec, SessionView, raise_for_terminal


def test_throttle_reports_once_per_interval() -> None:
    t = ActivityThrottle(interval=10)
    assert t.claim(None, now=100) == 0
    assert t.claim(None, now=105) is None
    assert t.claim(None, now=110) == 0


def test_throttle_reports_busy_only_when_it_extends_protection() -> None:
    t = ActivityThrottle(interval=10)
    assert t.claim(300, now=0) == 300  # busy until 300
    assert t.claim(300, now=5) is None  # until 305: within the interval of what was reported
    assert t.claim(300, now=9) is None
    assert t.claim(600, now=9) == 600  # a longer command: announce it at once
    t.forget()
    assert t.claim(None, now=9) == 0


def test_wake_up_report_keeps_the_running_commands_busy_window() -> None:
    # The wake-up of a suspended session happens inside a command's call: reporting "not busy" there
    # would drop the command's protection (seen on the real node: re-suspended under the command).
    t = ActivityThrottle(interval=10)
    assert t.claim(120, now=0) == 120
    assert t.wake(now=3) == 117
    assert t.claim(None, now=4) is None  # the wake-up counts as the interval's report
    assert ActivityThrottle(interval=10).wake(now=3) == 0


@pytest.mark.parametrize(("idle", "expected"), [(None, 60.0), ("15m", 60.0), ("100s", 20.0), ("2s", 1.0)])
def test_interval_follows_the_idle_timeout(idle: str | None, expected: float) -> None:
    assert interval_for(idle) == expected


def test_durations() -> None:
    assert parse_seconds("1h30m") == 5400
    assert parse_seconds("1.5s") == 1.5
    assert parse_seconds("2 h") is None and parse_seconds("") is None and parse_seconds("5d") is None
    assert normalize(90) == "90s" and normalize("2h") == "2h" and normalize(None) is None
    for bad in ("0s", "soon", -1, True):
        with pytest.raises(ValueError):
            normalize(bad)  # type: ignore[arg-type]


def test_session_names_are_deterministic_dns_labels() -> None:
    name = session_name("User 42 / Conversation #7: a very long thread identifier indeed, really long")
    assert name == session_name("User 42 / Conversation #7: a very long thread identifier indeed, really long")
    assert len(name) <= 63 and name.startswith("thread-user-42-conversation-7")
    assert session_name("a") != session_name("b")
    assert session_name("!!!").startswith("thread-") and len(session_name("!!!")) == len("thread-") + 10
    with pytest.raises(ValueError):
        session_name("")


def test_spec_and_conflicts() -> None:
    spec = SessionSpec(warm_pool="p", ttl="2h", env={"A": "1"}, pod_labels={"sandbox.users.io/t": "x"})
    assert spec.to_spec() == {
        "warmPoolRef": {"name": "p"},
        "ttl": "2h",
        "env": [{"name": "A", "value": "1"}],
        "podLabels": {"sandbox.users.io/t": "x"},
    }
    same = {"spec": {**spec.to_spec(), "idleTimeout": "5m"}}
    assert spec.conflicts(same) == []  # unset fields never conflict
    other = {"spec": {"warmPoolRef": {"name": "q"}, "ttl": "2h", "env": [{"name": "B", "value": "1"}]}}
    problems = spec.conflicts(other)
    assert len(problems) == 3 and "warmPoolRef" in problems[0]
    assert SessionSpec().conflicts(other) == []  # attaching by name alone


T = "2025-01-01T12:00:00Z"


def _body(phase: str, **status: object) -> dict[str, object]:
    return {
        "metadata": {"name": "s", "namespace": "n", "uid": "u"},
        "spec": {"idleTimeout": "5m"},
        "status": {"phase": phase, **status},
    }


def test_view_and_terminal_errors() -> None:
    view = SessionView.of(_body("Ready", podIPs=["127.1.0.5"], podName="s", sandboxName="s", claimName="s"))
    assert view.ready and view.idle_timeout == "5m" and view.claim_name == "s"
    raise_for_terminal(view)
    expired = _body(
        "Expired",
        conditions=[
            {
                "type": "Expired",
                "status": "True",
                "reason": "IdleTimeout",
                "message": "idle for 5m",
                "lastTransitionTime": T,
            }
        ],
    )
    with pytest.raises(SessionExpired, match="IdleTimeout"):
        raise_for_terminal(SessionView.of(expired))
    refused = _body(
        "Failed",
        conditions=[
            {
                "type": "PolicyCompliant",
                "status": "False",
                "reason": "PolicyViolation",
                "message": "spec.ttl 5h exceeds 2h",
                "lastTransitionTime": T,
            }
        ],
    )
    with pytest.raises(PolicyViolation, match="exceeds"):
        raise_for_terminal(SessionView.of(refused))
    failed = _body(
        "Failed",
        conditions=[
            {
                "type": "Ready",
                "status": "False",
                "reason": "InvalidMetadata",
                "message": "fix spec.podLabels",
                "lastTransitionTime": T,
            }
        ],
    )
    with pytest.raises(SessionFailed, match="podLabels"):
        raise_for_terminal(SessionView.of(failed))


def test_endpoints_from_status() -> None:
    view = SessionView.of(_body("Ready", podIPs=["127.1.0.5"], podName="pod-a", sandboxName="pod-a"))
    endpoint = EndpointResolver(None, "n", pod_identity="address").resolve(view)
    assert endpoint.base_url == "http://127.1.0.5:8888" and endpoint.expected_hostname == "pod-a"
    assert router_headers(view, 8888) == {
        "X-Sandbox-ID": "pod-a",
        "X-Sandbox-Namespace": "n",
        "X-Sandbox-Port": "8888",
        "X-Sandbox-Pod-IP": "127.1.0.5",
    }
    from k8s_agent_sandbox.models import SandboxDirectConnectionConfig

    routed = EndpointResolver(
        SandboxDirectConnectionConfig(
            api_url="http://router.example:8080", extra_headers={"Authorization": "Bearer t"}
        ),
        "n",
        pod_identity="address",
    )
    endpoint = routed.resolve(view)
    assert endpoint.base_url == "http://router.example:8080"
    assert endpoint.headers["X-Sandbox-ID"] == "pod-a" and endpoint.headers["Authorization"] == "Bearer t"
