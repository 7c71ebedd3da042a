"""The operator's own API client (kube/api.py): credentials from a kubeconfig or the pod, and requests over a
real aiohttp server on loopback."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp.web
import pytest
import yaml

from agentsession_operator.kube import api, transport


def _kubeconfig(tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None, name: str = "k") -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://10.0.0.1:6443/"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}}],
        "current-context": "ctx",
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_kubeconfig_context_with_files_relative_to_it(tmp_path: Path) -> None:
    path = _kubeconfig(
        tmp_path,
        {"client-certificate": "pki/admin.crt", "client-key": "/abs/admin.key"},
        {"server": "https://10.0.0.1:6443/", "certificate-authority": "pki/ca.crt"},
    )
    creds = api.from_kubeconfig([str(path)])
    assert creds.server == "https://10.0.0.1:6443" and creds.namespace == "team-a"
    assert creds.ca_file == str(tmp_path / "pki/ca.crt") and creds.cert_file == str(tmp_path / "pki/admin.crt")
    assert creds.key_file == "/abs/admin.key" and creds.bearer() is None


def test_kubeconfigs_merge_first_one_wins(tmp_path: Path) -> None:
    first = _kubeconfig(tmp_path, {"token": "from-first"}, name="one")
    second = _kubeconfig(tmp_path, {"token": "from-second"}, name="two")
    creds = api.load_credentials({"KUBECONFIG": f"{tmp_path / 'missing'}{os.pathsep}{first}{os.pathsep}{second}"})
    assert creds.bearer() == "from-first" and creds.connection_info()["scheme"] == "Bearer"


def test_inline_data_is_decoded(tmp_path: Path) -> None:
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----").decode()
    creds = api.from_kubeconfig(
        [str(_kubeconfig(tmp_path, {}, {"server": "https://x", "certificate-authority-data": ca}))]
    )
    assert creds.ca_data == b"-----BEGIN CERTIFICATE-----" and creds.ca_file is None


def test_no_kubeconfig_and_no_pod_says_what_to_set(tmp_path: Path) -> None:
    with pytest.raises(api.ConfigError, match="set KUBECONFIG"):
        api.load_credentials({"KUBECONFIG": str(tmp_path / "none")})


def test_a_context_without_a_server_is_refused_with_its_name(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path, {}, {"insecure-skip-tls-verify": True})
    with pytest.raises(api.ConfigError, match="'ctx' names no cluster with a server"):
        api.from_kubeconfig([str(path)])


def test_the_pods_token_is_read_again_as_it_rotates(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("first\n")
    (tmp_path / "namespace").write_text("agentsession-system")
    creds = api.in_cluster("10.96.0.1", "443", tmp_path)
    assert creds.server == "https://10.96.0.1:443" and creds.namespace == "agentsession-system"
    assert creds.bearer(now=1000.0) == "first"
    (tmp_path / "token").write_text("second\n")
    assert creds.bearer(now=1000.0 + api.TOKEN_REREAD - 1) == "first"  # kept a while: no read per request
    assert creds.bearer(now=1000.0 + api.TOKEN_REREAD) == "second"
    assert api.in_cluster("fd00::1", "443", tmp_path).server == "https://[fd00::1]:443"


def test_an_exec_plugins_token_is_kept_until_it_expires(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin"
    count = tmp_path / "count"
    plugin.write_text(
        f"#!{sys.executable}\nimport json, os, pathlib\n"
        f"p = pathlib.Path({str(count)!r}); n = int(p.read_text()) + 1 if p.exists() else 1; p.write_text(str(n))\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "print(json.dumps({'status': {'token': f\"t{n}-{info['kind']}-{os.environ['EXTRA']}\"}}))\n"
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    exec_config = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": str(plugin),
        "env": [{"name": "EXTRA", "value": "e"}],
    }
    creds = api.from_kubeconfig([str(_kubeconfig(tmp_path, {"exec": exec_config}))])
    assert creds.bearer(now=0.0) == "t1-ExecCredential-e"
    assert creds.bearer(now=1.0) == "t1-ExecCredential-e" and count.read_text() == "1"


def test_a_failing_exec_plugin_says_which(tmp_path: Path) -> None:
    creds = api.from_kubeconfig([str(_kubeconfig(tmp_path, {"exec": {"command": "/bin/false"}}))])
    with pytest.raises(api.ConfigError, match="exec plugin '/bin/false' failed"):
        creds.bearer()


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[aiohttp.web.Request], list[bytes]]]:
    seen: list[aiohttp.web.Request] = []
    bodies: list[bytes] = []

    async def handle(request: aiohttp.web.Request) -> aiohttp.web.Response:
        seen.append(request)
        bodies.append(await request.read())
        if request.path.endswith("/missing"):
            status = {"kind": "Status", "code": 404, "message": "not found"}
            return aiohttp.web.json_response(status, status=404, headers={"Retry-After": "2"})
        return aiohttp.web.json_response({"path": request.path, "query": request.query_string})

    app = aiohttp.web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", seen, bodies
    finally:
        await runner.cleanup()


async def test_a_request_carries_the_token_body_and_query(server: Any) -> None:
    url, seen, bodies = server
    client = api.ApiClient(api.Credentials(server=url, token="secret"), "agentsession-operator leader-election")
    try:
        answer = await client.call(
            "PATCH",
            "/apis/g/v1/x",
            query=[("labelSelector", "a=b,c"), ("watch", False)],
            body={"k": [1]},
            content_type="application/merge-patch+json",
        )
    finally:
        await client.close()
    assert answer["path"] == "/apis/g/v1/x"
    request = seen[0]
    assert request.headers["Authorization"] == "Bearer secret"
    assert request.headers["Content-Type"] == "application/merge-patch+json"
    assert request.headers["User-Agent"].endswith(" leader-election")
    assert request.query["labelSelector"] == "a=b,c" and request.query["watch"] == "false"
    assert json.loads(bodies[0]) == {"k": [1]}


async def test_an_answer_other_than_2xx_is_an_api_exception_with_status_body_and_headers(server: Any) -> None:
    url, _, _ = server
    client = api.ApiClient(api.Credentials(server=url))
    transport.install(client)  # the transport's view of it: a 404 is not retried
    try:
        with pytest.raises(api.ApiException) as refused:
            await client.call("GET", "/api/v1/namespaces/x/configmaps/missing")
    finally:
        await client.close()
    assert refused.value.status == 404 and refused.value.headers["Retry-After"] == "2"
    assert json.loads(refused.value.body)["message"] == "not found"
    assert "(404) Reason: Not Found" in str(refused.value)


def test_the_operator_imports_no_generated_kubernetes_client() -> None:
    """kubernetes_asyncio's client package imports ~850 generated modules (37 MiB at rest, issue 54 item 2)."""
    code = "import sys, agentsession_operator.cli; print(sorted({m.split('.')[0] for m in sys.modules}))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "kubernetes_asyncio" not in loaded
