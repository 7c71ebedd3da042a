"""The client's Kubernetes layer (SessionStore) and endpoint resolution against an in-memory API:
attach on 409, admission refusals, the Ready watch (410 Gone, deletion, terminal phases, timeout)."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from langchain_k8s_client import backend as backend_module
from langchain_k8s_client import sessions
from langchain_k8s_client.backend import AgentSessionSandbox
from langchain_k8s_client.errors import (
    PolicyViolation,
    SessionConflict,
    SessionExpired,
    SessionNotFound,
    SessionNotReady,
)
from langchain_k8s_client.sandbox_activity import ActivityHooks
from langchain_k8s_client.sessions import SessionSpec, SessionStore

T = "2025-01-01T12:00:00Z"


def body(phase: str | None = None, rv: str = "1", **status: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "s", "namespace": "n", "uid": "u", "resourceVersion": rv},
        "spec": {"warmPoolRef": {"name": "pool"}},
    }
    if phase is not None:
        obj["status"] = {"phase": phase, **status}
    return obj


READY = {"podIPs": ["127.0.0.9"], "podName": "pod-0", "sandboxName": "pod-0"}


def api_error(status: int, message: str = "") -> ApiException:
    exc = ApiException(status=status, reason="refused")
    exc.body = json.dumps({"message": message})
    return exc


class FakeApi:
    """The CustomObjectsApi calls SessionStore makes."""

    def __init__(self) -> None:
        self.stored: dict[str, Any] | None = None
        self.create_error: ApiException | None = None
        self.created: list[dict[str, Any]] = []
        self.patches: list[dict[str, Any]] = []

    def get_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
        if self.stored is None:
            raise api_error(404)
        return copy.deepcopy(self.stored)

    def create_namespaced_custom_object(self, group: str, version: str, ns: str, plural: str, obj: Any) -> Any:
        self.created.append(obj)
        if self.create_error is not None:
            raise self.create_error
        self.stored = {**obj, "metadata": {**obj["metadata"], "uid": "u", "resourceVersion": "1"}}
        return copy.deepcopy(self.stored)

    def patch_namespaced_custom_object(self, *args: Any) -> None:
        self.patches.append(args[-1])

    def list_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError("only through the fake watch")


class FakeWatch:
    """`watch.Watch()`: each stream() plays the next script (a list of events, or an exception)."""

    scripts: list[list[dict[str, Any]] | Exception] = []
    calls: list[dict[str, Any]] = []

    def stream(self, func: Any, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        FakeWatch.calls.append(kwargs)
        script = FakeWatch.scripts.pop(0)
        if isinstance(script, Exception):
            raise script
        yield from script

    def stop(self) -> None:
        pass


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    monkeypatch.setattr(sessions.watch, "Watch", FakeWatch)
    FakeWatch.scripts, FakeWatch.calls = [], []
    return FakeApi()


@pytest.fixture
def store(api: FakeApi) -> SessionStore:
    s = SessionStore(client.ApiClient())
    s.api = api  # type: ignore[assignment]
    return s


# ---- get_or_create ----------------------------------------------------------------------------
def test_creates_when_absent(store: SessionStore, api: FakeApi) -> None:
    _, created = store.get_or_create("n", "s", SessionSpec(warm_pool="pool", ttl="1h"))
    assert created and api.created[0]["spec"] == {"warmPoolRef": {"name": "pool"}, "ttl": "1h"}
    assert api.created[0]["apiVersion"] == "agentsession.dev/v1alpha1" and api.created[0]["kind"] == "AgentSession"


def test_attaches_when_another_process_created_it_first(store: SessionStore, api: FakeApi) -> None:
    api.create_error = api_error(409)
    original_get = api.get_namespaced_custom_object
    calls = {"n": 0}

    def get_after_conflict(*args: Any) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise api_error(404)  # absent when we looked ...
        api.stored = body()  # ... created by someone else before our create
        return original_get(*args)

    api.get_namespaced_custom_object = get_after_conflict  # type: ignore[method-assign]
    obj, created = store.get_or_create("n", "s", SessionSpec(warm_pool="pool"))
    assert not created and obj["metadata"]["uid"] == "u"
    with pytest.raises(SessionConflict, match="warmPoolRef"):
        store.get_or_create("n", "s", SessionSpec(warm_pool="other"))


def test_admission_refusals_are_typed(store: SessionStore, api: FakeApi) -> None:
    api.create_error = api_error(403, "AgentSession refused by AgentSessionPolicy: spec.ttl 5h exceeds 2h")
    with pytest.raises(PolicyViolation, match="exceeds"):
        store.get_or_create("n", "s", SessionSpec(warm_pool="pool"))
    api.create_error = api_error(422, "spec.ttl: Invalid value")
    with pytest.raises(ValueError, match=r"refused by the API server: spec\.ttl"):
        store.get_or_create("n", "s", SessionSpec(warm_pool="pool"))
    with pytest.raises(ValueError, match="DNS label"):
        store.get_or_create("n", "Not_A_Label", SessionSpec())


def test_activity_report_is_the_apis_format(store: SessionStore, api: FakeApi) -> None:
    from agentsession_api.activity import parse_activity

    store.report_activity("n", "s", 12.5)
    value = api.patches[0]["metadata"]["annotations"]["agentsession.dev/activity"]
    assert parse_activity(value) is not None and value.endswith(" busy=12.5")


# ---- wait_ready -------------------------------------------------------------------------------
def test_wait_ready_follows_the_watch_and_restarts_after_410(store: SessionStore, api: FakeApi) -> None:
    api.stored = body("Pending", rv="5")
    FakeWatch.scripts = [
        [{"type": "MODIFIED", "object": body("Provisioning", rv="6")}],  # the watch ends: watch again
        api_error(410),  # history expired: read the object again, watch from its version
        [{"type": "MODIFIED", "object": body("Ready", rv="9", **READY)}],
    ]
    api_stored_after_410 = body("Provisioning", rv="8")
    original_get = api.get_namespaced_custom_object

    def get(*args: Any) -> dict[str, Any]:
        if len(FakeWatch.calls) >= 2:
            api.stored = api_stored_after_410
        return original_get(*args)

    api.get_namespaced_custom_object = get  # type: ignore[method-assign]
    view = store.wait_ready("n", "s", timeout=30)
    assert view.ready and view.pod_ips == ["127.0.0.9"]
    assert [c["resource_version"] for c in FakeWatch.calls] == ["5", "6", "8"]
    assert all(c["field_selector"] == "metadata.name=s" for c in FakeWatch.calls)


def test_wait_ready_raises_typed_errors(store: SessionStore, api: FakeApi) -> None:
    api.stored = body("Pending")
    FakeWatch.scripts = [[{"type": "DELETED", "object": body("Pending")}]]
    with pytest.raises(SessionNotFound, match="deleted"):
        store.wait_ready("n", "s", timeout=30)
    expired = body(
        "Expired",
        conditions=[
            {"type": "Expired", "status": "True", "reason": "IdleTimeout", "message": "idle", "lastTransitionTime": T}
        ],
    )
    FakeWatch.scripts = [[{"type": "MODIFIED", "object": expired}]]
    with pytest.raises(SessionExpired, match="IdleTimeout"):
        store.wait_ready("n", "s", timeout=30)
    FakeWatch.scripts = []
    with pytest.raises(SessionNotReady, match="not Ready after 0 s"):
        store.wait_ready("n", "s", timeout=0)
    api.stored = None
    with pytest.raises(SessionNotFound):
        store.wait_ready("n", "s", timeout=30)


def test_wait_ready_on_a_session_without_status_says_so(store: SessionStore, api: FakeApi) -> None:
    """A new session has no phase until it is Ready or has provisioned for a while: the timeout says so."""
    api.stored = body()
    FakeWatch.scripts = []
    with pytest.raises(SessionNotReady, match="not Ready after 0 s: no status from the operator yet"):
        store.wait_ready("n", "s", timeout=0)


def test_wait_ready_reports_each_new_step_once(
    store: SessionStore, api: FakeApi, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 52 item 4: a long wait says where it is. Each new phase or Ready reason/message is given to the
    callback and logged, once (a status write that changes nothing else is not a step)."""

    def pending(reason: str, message: str, rv: str) -> dict[str, Any]:
        cond = {"type": "Ready", "status": "False", "reason": reason, "message": message, "lastTransitionTime": T}
        return body("Pending", rv=rv, conditions=[cond])

    api.stored = body(rv="1")
    FakeWatch.scripts = [
        [
            {"type": "MODIFIED", "object": pending("WaitingForPool", "warm pool py has no ready pod", "2")},
            {"type": "MODIFIED", "object": pending("WaitingForPool", "warm pool py has no ready pod", "3")},
            {"type": "MODIFIED", "object": pending("ClaimPending", "pod is Pending", "4")},
            {"type": "MODIFIED", "object": body("Ready", rv="5", **READY)},
        ]
    ]
    steps: list[sessions.WaitProgress] = []
    caplog.set_level("INFO", logger="langchain_k8s_client.sessions")
    store.wait_ready("n", "s", timeout=30, on_progress=steps.append)
    assert [(p.phase, p.reason) for p in steps] == [
        ("Pending", ""),
        ("Pending", "WaitingForPool"),
        ("Pending", "ClaimPending"),
        ("Ready", ""),
    ]
    assert all(p.name == "s" and p.namespace == "n" and p.elapsed >= 0 for p in steps)
    assert str(steps[1]).startswith("agentsession/s: Pending (WaitingForPool: warm pool py has no ready pod) after ")
    logged = [r.getMessage() for r in caplog.records if r.name == "langchain_k8s_client.sessions"]
    assert logged == [str(p) for p in steps]


# ---- endpoint resolution through the session -------------------------------------------------------
class StoreOf:
    """A SessionStore for AgentSessionSandbox that serves fixed bodies and records activity."""

    def __init__(self, api_client: Any = None) -> None:
        self.api_client = api_client
        self.current = body("Ready", **READY)
        self.reports: list[float] = []
        self.ready = body("Ready", **READY)

    def get_or_create(self, namespace: str, name: str, spec: Any) -> tuple[dict[str, Any], bool]:
        return self.current, False

    def require(self, namespace: str, name: str) -> dict[str, Any]:
        return self.current

    def wait_ready(
        self, namespace: str, name: str, timeout: float, on_progress: Any = None, body: Any = None
    ) -> sessions.SessionView:
        return sessions.SessionView.of(self.ready)

    def report_activity(self, namespace: str, name: str, busy_seconds: float = 0) -> dict[str, Any] | None:
        self.reports.append(busy_seconds)
        return None


def test_endpoint_comes_from_the_status_and_suspension_is_handled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend_module, "SessionStore", StoreOf)
    sandbox = AgentSessionSandbox("s", "n", pod_identity="address")
    store = sandbox._store
    assert isinstance(store, StoreOf)
    endpoint = sandbox._resolve_endpoint()
    assert endpoint.base_url == "http://127.0.0.9:8888" and endpoint.expected_hostname == "pod-0"

    store.current = body("Suspended")  # idle-suspended: activity wakes it, then it is Ready again
    store.reports.clear()
    assert sandbox._resolve_endpoint().base_url == "http://127.0.0.9:8888"
    assert store.reports == [0]

    store.current = {**body("Suspended"), "spec": {"suspend": True}}  # suspended on purpose: no waking
    with pytest.raises(SessionNotReady, match=r"spec\.suspend"):
        sandbox._resolve_endpoint()


def test_a_call_after_a_suspension_asks_where_the_pod_is_before_calling_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The activity report sent before a call answers with the session's status. Suspended since the last
    call: the call must not go to the cached pod (on a real node it still answers while it terminates, so
    the command ran there and the session was still Suspended after it; seen under load), but resolve
    first, which wakes the session and waits for the new pod."""

    class Answering(StoreOf):
        def report_activity(self, namespace: str, name: str, busy_seconds: float = 0) -> dict[str, Any]:
            self.reports.append(busy_seconds)
            return self.current

    monkeypatch.setattr(backend_module, "SessionStore", Answering)
    sandbox = AgentSessionSandbox("s", "n", pod_identity="address")
    store = sandbox._store
    assert isinstance(store, Answering)
    sandbox.transport.set_endpoint(sandbox._resolve_endpoint())
    assert not sandbox.transport._stale

    sandbox._report_activity(30)  # still Ready: the cached pod is used
    assert not sandbox.transport._stale
    store.current = body("Suspended")
    sandbox._throttle.forget()
    sandbox._report_activity(30)
    assert sandbox.transport._stale  # the next request resolves: wakes the session, waits for Ready

    store.current = {"status": "garbage"}  # an odd answer never breaks the call
    sandbox._throttle.forget()
    sandbox.transport.set_endpoint(sandbox.transport._endpoint)
    sandbox._report_activity(30)
    assert not sandbox.transport._stale


def test_a_first_calls_report_runs_beside_the_resolve_and_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first call resolves the pod (a read of the session that says whether it is Ready): its activity
    report runs beside it instead of before it (issue 53 item 5: 17 to 25 ms of a cold session's first
    command), and the call waits for the report at its end. A call to a resolved pod reports first, as
    before: the report's answer is what says the session is still Ready."""
    release, reported = threading.Event(), threading.Event()

    class Slow(StoreOf):
        def report_activity(self, namespace: str, name: str, busy_seconds: float = 0) -> dict[str, Any] | None:
            assert release.wait(10), "the report was waited for before the resolve"
            reported.set()
            return super().report_activity(namespace, name, busy_seconds)

        def require(self, namespace: str, name: str) -> dict[str, Any]:
            release.set()  # the resolve runs while the report is still in flight
            return super().require(namespace, name)

    monkeypatch.setattr(backend_module, "SessionStore", Slow)
    sandbox = AgentSessionSandbox("s", "n", pod_identity="address")
    assert sandbox.transport.stale
    wait = sandbox._report_activity(30)
    assert wait is not None and not reported.is_set()
    sandbox._resolve_endpoint()
    wait()
    assert reported.is_set() and sandbox._store.reports == [30]

    sandbox.transport.set_endpoint(sandbox._resolve_endpoint())
    sandbox._throttle.forget()
    assert sandbox._report_activity(30) is None and sandbox._store.reports == [30, 30]  # before the call


def test_the_activity_hooks_wait_for_a_report_left_beside_the_operation() -> None:
    order: list[str] = []

    def report(busy: float | None) -> Callable[[], None]:
        order.append("report")
        return lambda: order.append("joined")

    with ActivityHooks(on_activity=report).operation(None):
        order.append("operation")
    assert order == ["report", "operation", "joined"]

    async def scenario() -> list[str]:
        seen: list[str] = []

        async def joined() -> None:
            seen.append("joined")

        async def areport(busy: float | None) -> Awaitable[None]:
            seen.append("report")
            return asyncio.ensure_future(joined())

        async with ActivityHooks(aon_activity=areport).aoperation(None):
            seen.append("operation")
        return seen

    assert asyncio.run(scenario()) == ["report", "operation", "joined"]
