"""Issue 28 item 12: the client checks the pod it reached against what the API says the session's pod is.

Attack: the pod's name is all the client checked, and a pod name is unique only within a namespace: a pod
of another namespace named like the session's (through the router, which picks its target from headers, or
at an IP the session's pod had before it was replaced) answered the probe as the session's pod, and got
the session's commands and files. A pod IP is unique in the cluster: the client now also checks that the
pod's own addresses hold the IP the session's status names (status.podIPs, which the operator copies from
the API), and refuses with both sides named.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from pathlib import Path

import pytest

from agentsession_api import names
from langchain_k8s_client import PodSandbox, UnverifiedPod, WrongPod, cluster_keys, pod_identity, probe, script_text
from langchain_k8s_client.endpoints import EndpointResolver
from langchain_k8s_client.sessions import SessionView
from langchain_k8s_client.transport import PodEndpoint
from tests.unit.client.fakes import BASE, ClusterSigner, FakeRuntime, wrapped

SESSION_POD, SESSION_IP = "s-7f3k2", "10.244.1.17"


def _view(pod_ips: list[str]) -> SessionView:
    body = {
        "metadata": {"name": "s", "namespace": "team-a", "uid": "u"},
        "status": {"phase": "Ready", "podName": SESSION_POD, "podIPs": pod_ips, "sandboxName": "s"},
    }
    return SessionView.of(body)


def test_a_namesake_pod_at_another_address_is_refused_before_any_command() -> None:
    impostor = FakeRuntime(hostname=SESSION_POD, addresses="v4=10.244.2.9/32 127.0.0.0/8 127.0.0.1/32")
    endpoint = EndpointResolver(None, "team-a", pod_identity="address").resolve(_view([SESSION_IP]))
    transport = impostor.transport(
        endpoint=PodEndpoint(BASE, expected_hostname=endpoint.expected_hostname, expected_ips=endpoint.expected_ips)
    )
    with pytest.raises(WrongPod) as info:
        transport.execute("cat ~/.secrets", timeout=5, max_output=100)
    message = str(info.value)
    assert SESSION_POD in message and SESSION_IP in message and "10.244.2.9" in message, message
    assert impostor.argvs() == []  # the command never left


def test_the_endpoint_expects_the_ips_the_status_names_in_every_mode() -> None:
    endpoint = EndpointResolver(None, "team-a", pod_identity="address").resolve(_view([SESSION_IP, "fd00::17"]))
    assert endpoint.expected_hostname == SESSION_POD
    assert endpoint.expected_ips == (SESSION_IP, "fd00::17")


@pytest.mark.parametrize(
    "addresses",
    [
        f"v4={SESSION_IP}/32 127.0.0.0/8 127.0.0.1/32",
        "v4=127.0.0.0/8 127.0.0.1/32\nv6=fd000000000000000000000000000017 00000000000000000000000000000001",
    ],
    ids=["v4", "v6"],
)
def test_the_sessions_pod_is_accepted(addresses: str) -> None:
    pod = FakeRuntime(hostname=SESSION_POD, addresses=addresses, answers=[wrapped(b"ok\n")])
    ips = (SESSION_IP, "fd00::17") if "v6=" in addresses else (SESSION_IP,)
    transport = pod.transport(endpoint=PodEndpoint(BASE, expected_hostname=SESSION_POD, expected_ips=ips))
    assert transport.execute("echo ok", timeout=5, max_output=100).output == "ok\n"


def test_a_pod_on_a_shared_loopback_range_is_accepted() -> None:
    """The kwok node's pods are processes on 127.x addresses in the host's network: 127.0.0.0/8 is local."""
    pod = FakeRuntime(hostname=SESSION_POD, addresses="v4=127.0.0.0/8 127.0.0.1/32", answers=[wrapped()])
    transport = pod.transport(endpoint=PodEndpoint(BASE, expected_hostname=SESSION_POD, expected_ips=("127.5.0.7",)))
    assert transport.execute("true", timeout=5, max_output=10).exit_code == 0


def test_the_probe_reports_the_addresses_of_the_network_it_runs_in() -> None:
    """The probe script itself, run here: this machine's own addresses, as a pod's are in its namespace."""
    out = subprocess.run(["sh", "-c", probe.build_probe()], capture_output=True, text=True, cwd="/tmp", check=True)
    info = probe.parse_probe(out.stdout)
    assert info.holds("127.0.0.1"), info.addresses
    assert not info.holds("203.0.113.7"), info.addresses


def test_a_pod_showing_no_address_of_the_family_is_judged_by_its_name() -> None:
    """gVisor's kernel lists no IPv4 addresses (no /proc/net/fib_trie), only if_inet6's."""
    pod = FakeRuntime(hostname=SESSION_POD, addresses="v4=\nv6=00000000000000000000000000000001", answers=[wrapped()])
    transport = pod.transport(endpoint=PodEndpoint(BASE, expected_hostname=SESSION_POD, expected_ips=(SESSION_IP,)))
    assert transport.execute("true", timeout=5, max_output=10).exit_code == 0
    impostor = FakeRuntime(hostname="another-pod", addresses="v4=\nv6=00000000000000000000000000000001")
    with pytest.raises(WrongPod):
        impostor.transport(
            endpoint=PodEndpoint(BASE, expected_hostname=SESSION_POD, expected_ips=(SESSION_IP,))
        ).execute("true", timeout=5, max_output=10)


# ---- issue 51 item 1: a namesake that holds the IP the status names (a stale status) -----------------------

AT_SESSION_IP = f"v4={SESSION_IP}/32 127.0.0.0/8 127.0.0.1/32"


@pytest.fixture(autouse=True)
def stand_in_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """ClusterSigner's stand-in API clients serve their keys; the cache starts empty."""
    monkeypatch.setattr(cluster_keys, "read_jwks", lambda api: api.read_jwks())
    monkeypatch.setattr(cluster_keys, "_CACHE", {})


def _reached(pod: FakeRuntime, signer: ClusterSigner) -> PodSandbox:
    """The client's own path: the endpoint the resolver makes from the status, pointed at the fake pod."""
    endpoint = EndpointResolver(None, "team-a", signer.api_client()).resolve(_view([SESSION_IP]))
    return pod.sandbox(endpoint=dataclasses.replace(endpoint, base_url=BASE))


def test_a_namesake_at_the_sessions_ip_without_an_identity_token_gets_nothing() -> None:
    impostor = FakeRuntime(hostname=SESSION_POD, addresses=AT_SESSION_IP)
    sandbox = _reached(impostor, ClusterSigner())
    with pytest.raises(WrongPod) as info:
        sandbox.execute("cat ~/.secrets")
    assert "identity" in str(info.value), info.value
    with pytest.raises(WrongPod):
        sandbox.upload_files([("/tmp/f", b"the session's file")])
    assert impostor.argvs() == [] and [p for p in impostor.paths() if p != "POST /execute"] == []


def test_a_namesake_with_the_clusters_token_for_its_own_namespace_gets_nothing() -> None:
    signer = ClusterSigner()
    token = signer.token("team-b", SESSION_POD)  # minted by the cluster, for tenant B's namesake pod
    impostor = FakeRuntime(hostname=SESSION_POD, addresses=f"{AT_SESSION_IP}\nidtoken={token}")
    with pytest.raises(WrongPod) as info:
        _reached(impostor, signer).execute("cat ~/.secrets")
    assert "team-b" in str(info.value) and "team-a" in str(info.value), info.value
    assert impostor.argvs() == []


@pytest.mark.parametrize("kind", ["EC", "RSA"])
def test_the_sessions_own_pod_proves_itself_with_its_token(kind: str) -> None:
    signer = ClusterSigner(kind)
    own = FakeRuntime(
        hostname=SESSION_POD,
        addresses=f"{AT_SESSION_IP}\nidtoken={signer.token('team-a', SESSION_POD)}",
        answers=[wrapped(b"ok\n")],
    )
    assert _reached(own, signer).execute("echo ok").output == "ok\n"


def _refused(token: str, signer: ClusterSigner) -> str:
    impostor = FakeRuntime(hostname=SESSION_POD, addresses=f"{AT_SESSION_IP}\nidtoken={token}")
    with pytest.raises(WrongPod) as info:
        _reached(impostor, signer).execute("cat ~/.secrets")
    assert impostor.argvs() == []
    return str(info.value)


def test_a_token_of_another_signer_is_refused() -> None:
    forged = ClusterSigner(kid="k1").token("team-a", SESSION_POD)  # the same key ID, another key
    assert "bad signature" in _refused(forged, ClusterSigner(kid="k1"))


def test_a_token_for_another_audience_is_refused() -> None:
    """The pod's API token (the API server's audience) proves nothing here, and is not asked for."""
    signer = ClusterSigner()
    assert "not agentsession.dev/pod-identity" in _refused(
        signer.token("team-a", SESSION_POD, audience="https://kubernetes.default.svc.cluster.local"), signer
    )


def test_an_expired_token_is_refused() -> None:
    signer = ClusterSigner()
    old = signer.token("team-a", SESSION_POD, issued=time.time() - 7200, lifetime=600)
    assert "expired" in _refused(old, signer)


def test_a_malformed_or_oversized_token_is_refused() -> None:
    signer = ClusterSigner()
    assert "malformed" in _refused("not.a-token", signer)
    assert "too large" in _refused("a" * 20000, signer)


def test_a_key_the_set_lacks_fetches_the_keys_again_on_the_next_resolution() -> None:
    """Key rotation: a token signed by a key added since the fetch is refused once, then the next endpoint
    resolution fetches the keys again (at most every REFETCH_INTERVAL)."""
    signer = ClusterSigner(kid="rotated")
    api = signer.api_client()
    first = cluster_keys.keys_of(api)
    assert signer.jwks_requests == 1 and "rotated" in first.keys
    assert cluster_keys.keys_of(api) is first  # cached
    with pytest.raises(UnverifiedPod, match="not one of the cluster's"):
        pod_identity.verify(ClusterSigner(kid="newer").token("team-a", SESSION_POD), first)
    assert first.stale  # marked by the unknown key
    first.fetched_at -= cluster_keys.REFETCH_INTERVAL + 1
    cluster_keys.keys_of(api)
    assert signer.jwks_requests == 2


def test_keys_that_cannot_be_read_say_what_to_allow() -> None:
    class Forbidden:
        configuration = type("C", (), {"host": "https://forbidden"})()

        def read_jwks(self) -> bytes:
            raise RuntimeError("(403) Forbidden")

    with pytest.raises(UnverifiedPod, match=r"/openid/v1/jwks.*allow `get`"):
        EndpointResolver(None, "team-a", Forbidden()).resolve(_view([SESSION_IP]))


def test_address_mode_trusts_name_and_addresses_alone() -> None:
    pod = FakeRuntime(hostname=SESSION_POD, addresses=AT_SESSION_IP, answers=[wrapped(b"ok\n")])
    endpoint = EndpointResolver(None, "team-a", pod_identity="address").resolve(_view([SESSION_IP]))
    assert endpoint.identity is None
    assert pod.sandbox(endpoint=dataclasses.replace(endpoint, base_url=BASE)).execute("echo ok").output == "ok\n"
    with pytest.raises(ValueError, match="'token' or 'address'"):
        EndpointResolver(None, "team-a", pod_identity="none")  # type: ignore[arg-type]


def test_the_probe_reports_the_token_file_it_is_given(tmp_path: Path) -> None:
    """The probe script itself: the token file's one line (kubelet writes no newline), nothing without one."""
    token = tmp_path / "token"
    token.write_text("eyJh.eyJi.c2ln")
    script = script_text.load_script("probe.sh")
    for path, expected in ((token, "eyJh.eyJi.c2ln"), (tmp_path / "none", "")):
        out = subprocess.run(
            ["sh", "-c", script, "lkc", ".lkc-staging", str(path)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            check=True,
        )
        assert probe.parse_probe(out.stdout).identity_token == expected
    assert names.POD_IDENTITY_TOKEN_PATH in probe.build_probe()


def test_the_keys_are_read_through_a_real_api_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """`cluster_keys.read_jwks` with the installed kubernetes client (its call signatures changed between majors; the
    lowest-deps stage runs this at the floor) against a local server answering /openid/v1/jwks."""
    import http.server
    import threading

    from kubernetes import client

    monkeypatch.undo()  # the real read_jwks
    signer = ClusterSigner()
    seen: list[str] = []

    class Keys(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(f"{self.path} {self.headers.get('Authorization')}")
            body = json.dumps(signer.jwks()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/jwk-set+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Keys)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        configuration = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
        configuration.api_key = {"authorization": "t0ken"}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        keys = cluster_keys.keys_of(client.ApiClient(configuration))
    finally:
        server.shutdown()
        server.server_close()
    assert seen == ["/openid/v1/jwks Bearer t0ken"]
    pod_identity.verify(signer.token("team-a", SESSION_POD), keys)
