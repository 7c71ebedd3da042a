"""Sessions reachable from any namespace through agent-sandbox's router, authorized per session (issue 51 item 2).

The real node runs upstream's router as config/components/sandbox-router ships it (``--authz-mode=scoped-token``
with v2 keys), the operator issues the credentials (``--router-token-key-file``), and RBAC decides who gets
them (``create agentsessions/connect``). An app in namespace ``<team-a>-agents`` (a process on the test host, as
a LangGraph server outside the cluster would be, with its own ServiceAccount's token) runs a deep agent on a
session of team A through the router. Tenant B, from a labelled pod of its own namespace that the router's
NetworkPolicy admits, is refused without a credential, with its own session's credential, with an expired one,
and when it names A's pod by IP; a deleted session's credential stops working.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
from langchain_core.messages import AIMessage

from agentsession_api import router_access as ra
from agentsession_operator.issuer.tokens import SigningKey, Target
from devcluster.cluster import Cluster
from devcluster.ports import free_port
from devcluster.realnode import network
from langchain_k8s_client import AgentSessionSandbox, RouterAccessRefused, SessionManager
from langchain_k8s_client.testing import ScriptedToolModel
from langchain_k8s_client.testing import tool_call as call
from testkit import manifests, sandbox_router
from tests.e2e import install
from tests.e2e.conftest import Kube, OperatorProcess
from tests.e2e.test_real_node import _pod, _running
from tests.e2e.test_router_modes import _admit_the_test_host_to_the_router
from tests.e2e.test_ts_client import drive, ts_package  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

SYSTEM = sandbox_router.NAMESPACE
PORT = 8888


@pytest.fixture(scope="module")
def signing(tmp_path_factory: pytest.TempPathFactory) -> tuple[SigningKey, Path]:
    return sandbox_router.new_signing_key(tmp_path_factory.mktemp("router-keys"))


@pytest.fixture(scope="module")
def router(kube: Kube, signing: tuple[SigningKey, Path]) -> Iterator[str]:
    """The shipped router component in agentsession-system, verifying the module's key; its URL."""
    kube.run("create", "namespace", SYSTEM, check=False)
    objects = sandbox_router.objects(signing[0], network.HOST_IP, network.NODE_IP)
    kube.apply(*objects)
    kube.run("-n", SYSTEM, "rollout", "status", f"deployment/{sandbox_router.NAME}", "--timeout=180s")
    service = kube.get("service", sandbox_router.NAME, SYSTEM)
    assert service is not None
    try:
        yield f"http://{service['spec']['clusterIP']}:8080"
    finally:  # the issuer's ConfigMap too: other tests' routers get no issuer
        for doc in objects:
            if doc["kind"] not in ("Role", "RoleBinding"):
                kube.run(
                    "delete", doc["kind"].lower(), doc["metadata"]["name"], "-n", SYSTEM, "--wait=false", check=False
                )


@pytest.fixture(scope="module")
def issuing_operator(
    operator: OperatorProcess, signing: tuple[SigningKey, Path], router: str
) -> Iterator[OperatorProcess]:
    """The shared operator restarted as the issuer with the router admitted; back as shipped afterwards."""
    args = sandbox_router.operator_args(signing[1], free_port(), router)
    operator.stop()
    operator.extra_args += args
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()
        operator.extra_args = [a for a in operator.extra_args if a not in args]
        operator.start()


def _service_account_kubeconfig(kube: Kube, cluster: Cluster, namespace: str, account: str, tmp: Path) -> str:
    kube.run("create", "serviceaccount", account, "-n", namespace, check=False)
    token = kube.run("create", "token", account, "-n", namespace, "--duration=1h").stdout.strip()
    path = install._write(
        cluster,
        tmp / f"{namespace}-{account}.kubeconfig",
        token,
        f"system:serviceaccount:{namespace}:{account}",
        namespace,
    )
    return path


def _service_account_client(kube: Kube, cluster: Cluster, namespace: str, account: str, tmp: Path) -> Any:
    from kubernetes import config as kube_config

    return kube_config.new_client_from_config(
        config_file=_service_account_kubeconfig(kube, cluster, namespace, account, tmp)
    )


def _bind_client_role(kube: Kube, namespace: str, name: str, account_namespace: str, account: str) -> None:
    """The shipped client Role of `namespace` bound to a ServiceAccount (of any namespace)."""
    kube.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "agentsession-client"},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_namespace}],
        },
        namespace=namespace,
    )


@pytest.fixture(scope="module")
def tenants(
    kube: Kube,
    cluster: Cluster,
    pool_namespace: str,
    issuing_operator: OperatorProcess,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Any]]:
    """Team A (the pool namespace), the app's namespace, team B; the app may use A's sessions (the shipped
    client Role of A bound to the app's ServiceAccount), B only its own namespace's."""
    tmp = tmp_path_factory.mktemp("tenants")
    agents, team_b = f"{pool_namespace}-agents", f"{pool_namespace}-b"
    for ns in (agents, team_b):
        kube.run("create", "namespace", ns, check=False)
    install.client_kubeconfig(kube, cluster, pool_namespace, tmp)  # the client Role in team A
    install.client_kubeconfig(kube, cluster, team_b, tmp)
    _bind_client_role(kube, pool_namespace, "app-of-agents", agents, "app")
    _bind_client_role(kube, team_b, "tenant-b-own", team_b, "tenant")
    kube.apply(
        manifests.template("py", manifests.PYTHON_RUNTIME_IMAGE), manifests.warm_pool("pool", "py", 1), namespace=team_b
    )
    kube.apply(_pod("intruder", ["sleep", "900"], labels={"agentsession.dev/sandbox-client": "true"}), namespace=team_b)
    try:
        yield {
            "agents": agents,
            "team_b": team_b,
            "app": _service_account_client(kube, cluster, agents, "app", tmp),
            "app_kubeconfig": _service_account_kubeconfig(kube, cluster, agents, "app", tmp),
            "tenant_b": _service_account_client(kube, cluster, team_b, "tenant", tmp),
        }
    finally:
        for ns in (agents, team_b):
            kube.run("delete", "namespace", ns, "--wait=false", check=False)


def _issue(api_client: Any, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
    """Ask the published issuer as `api_client`'s principal, for the fixed paths."""
    import ssl

    from langchain_k8s_client.router_credentials import IssuerLocation, bearer_of

    issuer = IssuerLocation.published(api_client)
    assert issuer is not None, "the operator publishes its issuer"
    body = json.dumps({"port": PORT, "requests": [{"method": "POST", "path": "/execute"}]}).encode()
    request = urllib.request.Request(
        issuer.url + ra.TOKENS_PATH.format(namespace=namespace, name=name),
        data=body,
        headers={"Authorization": f"Bearer {bearer_of(api_client)}", "Content-Type": "application/json"},
    )
    context = ssl.create_default_context(cadata=issuer.ca)
    try:
        with urllib.request.urlopen(request, context=context, timeout=20) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def _from_intruder(kube: Kube, namespace: str, router: str, headers: dict[str, str]) -> str:
    """B's pod POSTs a command to the router with `headers`: 'status <code>' or 'error <reason>'."""
    script = (
        "import json,sys,urllib.request,urllib.error\n"
        f"r = urllib.request.Request({router + '/execute'!r}, data=json.dumps({{'command': 'echo B was here'}})"
        f".encode(), headers={headers!r})\n"
        "try:\n"
        "    print('status', urllib.request.urlopen(r, timeout=20).status)\n"
        "except urllib.error.HTTPError as e:\n"
        "    print('status', e.code)\n"
        "except Exception as e:\n"
        "    print('error', type(e).__name__)\n"
    )
    proc = kube.run("exec", "-n", namespace, "intruder", "--", "python3", "-c", script, check=False)
    return (proc.stdout or proc.stderr).strip()


def _target_headers(session: dict[str, Any], sandbox_uid: str) -> dict[str, str]:
    return {
        "X-Sandbox-ID": session["status"]["sandboxName"],
        "X-Sandbox-Namespace": session["metadata"]["namespace"],
        "X-Sandbox-Port": str(PORT),
        ra.SANDBOX_UID_HEADER: sandbox_uid,
        "Content-Type": "application/json",
    }


def test_an_app_in_another_namespace_runs_a_deep_agent_through_the_router(
    kube: Kube, pool_namespace: str, router: str, tenants: dict[str, Any]
) -> None:
    model = ScriptedToolModel(
        messages=iter(
            [
                call("write_file", {"file_path": "/tmp/w/hello.py", "content": "print('hi from team a')\n"}, "c1"),
                call("execute", {"command": "python3 /tmp/w/hello.py; hostname", "timeout": 30}, "c2"),
                call("read_file", {"file_path": "/tmp/w/hello.py"}, "c3"),
                AIMessage(content="done"),
            ]
        )
    )
    manager = SessionManager(
        pool_namespace,
        api_client=tenants["app"],
        warm_pool="python-pool",
        ttl="1h",
        connection=SandboxDirectConnectionConfig(api_url=router),
    )
    agent = manager.create_deep_agent(model, thread_id="cross-namespace")
    result = agent.invoke({"messages": [("user", "go")]})
    tools = {m.tool_call_id: m.content for m in result["messages"] if getattr(m, "type", "") == "tool"}
    assert "hi from team a" in tools["c2"] and "succeeded" in tools["c2"], tools
    assert "print('hi from team a')" in tools["c3"], tools
    session = kube.get("agentsession", manager.name_for("cross-namespace"), pool_namespace)
    assert session is not None and session["status"]["podName"] in tools["c2"]
    assert manager.delete("cross-namespace")


def test_tenant_b_is_refused_without_with_its_own_or_with_an_expired_credential(
    kube: Kube, pool_namespace: str, router: str, tenants: dict[str, Any], signing: tuple[SigningKey, Path]
) -> None:
    team_b = tenants["team_b"]
    connection = SandboxDirectConnectionConfig(api_url=router)
    with AgentSessionSandbox(
        "victim", pool_namespace, warm_pool="python-pool", connection=connection, api_client=tenants["app"]
    ) as victim:
        assert victim.execute("echo mine", timeout=30).output.strip() == "mine"
        session = kube.get("agentsession", "victim", pool_namespace)
        assert session is not None
        status, issued = _issue(tenants["app"], pool_namespace, "victim")
        assert status == 200, issued
        uid = issued["sandboxUID"]
        headers = _target_headers(session, uid)
        _running(kube, "intruder", team_b)

        # The issuer: B's principal may not connect to A's session (RBAC), and learns nothing of it.
        status, answer = _issue(tenants["tenant_b"], pool_namespace, "victim")
        assert status == 403 and "tokens" not in answer, answer

        # No credential.
        assert _from_intruder(kube, team_b, router, headers) == "status 401"
        # B's own session's credential (issued to B for B's session), against A's sandbox.
        kube.apply(manifests.session("own", "pool"), namespace=team_b)
        kube.wait_for(
            "B's session Ready",
            lambda: ((kube.get("agentsession", "own", team_b) or {}).get("status") or {}).get("phase") == "Ready",
            timeout=180,
        )
        status, own = _issue(tenants["tenant_b"], team_b, "own")
        assert status == 200, own
        with_own = {**headers, "Authorization": f"Bearer {own['tokens'][0]}"}
        assert _from_intruder(kube, team_b, router, with_own) == "status 403"
        # An expired one, for A's very target, signed with the operator's key.
        key, _ = signing
        target = Target(pool_namespace, session["status"]["sandboxName"], uid, PORT, "POST", "/execute")
        expired = {**headers, "Authorization": f"Bearer {key.mint(target, int(time.time()) - 1)}"}
        assert _from_intruder(kube, team_b, router, expired) == "status 401"
        # A's own valid token, but the pod named by IP (a routing override no token signs).
        stolen_route = {
            **headers,
            "Authorization": f"Bearer {issued['tokens'][0]}",
            "X-Sandbox-Pod-IP": session["status"]["podIPs"][0],
        }
        assert _from_intruder(kube, team_b, router, stolen_route) == "status 403"
        # The same valid token from B's pod works (a bearer credential): what the short expiry bounds.
        valid = {**headers, "Authorization": f"Bearer {issued['tokens'][0]}"}
        assert _from_intruder(kube, team_b, router, valid) == "status 200"
        assert victim.execute("echo still mine", timeout=30).output.strip() == "still mine"


def test_a_deleted_sessions_credential_stops_working(
    kube: Kube, pool_namespace: str, router: str, tenants: dict[str, Any]
) -> None:
    connection = SandboxDirectConnectionConfig(api_url=router)
    with AgentSessionSandbox(
        "short-lived", pool_namespace, warm_pool="python-pool", connection=connection, api_client=tenants["app"]
    ) as backend:
        assert backend.execute("echo up", timeout=30).output.strip() == "up"
        session = kube.get("agentsession", "short-lived", pool_namespace)
        assert session is not None
        status, issued = _issue(tenants["app"], pool_namespace, "short-lived")
        assert status == 200, issued
        headers = {**_target_headers(session, issued["sandboxUID"]), "Authorization": f"Bearer {issued['tokens'][0]}"}
        _running(kube, "intruder", tenants["team_b"])
        assert _from_intruder(kube, tenants["team_b"], router, headers) == "status 200"
        backend.delete_session()
    # Its Sandbox and its pod go with it (the pod stops serving when it is deleted, not when asked to stop).
    kube.wait_for(
        "the session's Sandbox and pod gone",
        lambda: (
            kube.get("sandbox", session["status"]["sandboxName"], pool_namespace) is None
            and kube.get("pod", session["status"]["podName"], pool_namespace) is None
        ),
        timeout=120,
    )
    reply = _from_intruder(kube, tenants["team_b"], router, headers)
    assert reply != "status 200", reply
    with pytest.raises(RouterAccessRefused) as refused:
        _must_issue(tenants["app"], pool_namespace, "short-lived")
    assert refused.value.status == 404


def _must_issue(api_client: Any, namespace: str, name: str) -> None:
    status, answer = _issue(api_client, namespace, name)
    if status != 200:
        raise RouterAccessRefused(str(answer.get("message")), status=status)


def test_the_operator_admits_only_a_router_that_refuses_a_call_without_a_credential(
    kube: Kube, router: str, issuing_operator: OperatorProcess
) -> None:
    """The start-up check against both real routers: upstream's as deployed by default (allow-all, in
    agent-sandbox-system) tries to route the call; the shipped component's refuses it (401). The issuing
    operator of this module was admitted to the latter (its log says so)."""
    from agentsession_operator.issuer import router_check

    allow_all = kube.get("service", "sandbox-router-svc", "agent-sandbox-system")
    assert allow_all is not None, "the real node deploys upstream's router"
    _admit_the_test_host_to_the_router(kube)  # upstream's, as test_router_modes admits it
    verdict = router_check.check(f"http://{allow_all['spec']['clusterIP']}:8080", wait=30)
    assert not verdict.admitted and ("not 401" in verdict.reason or "tried to route" in verdict.reason), verdict
    assert router_check.check(router, wait=30).admitted
    assert "sandbox router admitted" in issuing_operator.log.read_text()


def test_the_typescript_client_obtains_its_own_router_credentials(
    ts_package: Path,  # noqa: F811
    kube: Kube,
    pool_namespace: str,
    router: str,
    tenants: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same app identity, the TypeScript client: only `connection: {mode: "router", url}`; it finds the
    issuer, obtains and sends the credentials itself, and reaches its session's pod through the router."""
    monkeypatch.setenv("KUBECONFIG", tenants["app_kubeconfig"])
    options = {"warmPool": "python-pool", "ttl": "1h", "connection": {"mode": "router", "url": router}}
    steps = [{"op": "execute", "command": "echo ts through the router; hostname"}]
    answer = drive(
        ts_package, {"namespace": pool_namespace, "session": "ts-routed", "options": options, "steps": steps}
    )
    [executed] = answer["results"]
    session = kube.get("agentsession", "ts-routed", pool_namespace)
    assert session is not None
    assert executed.get("exitCode") == 0, executed
    assert executed["output"] == f"ts through the router\n{session['status']['podName']}\n", executed
    kube.run("delete", "agentsession", "ts-routed", "-n", pool_namespace, "--wait=false")
