"""The router credential issuer (issue 51 item 2): upstream's v2 token format, and who gets tokens for what."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentsession_api import router_access as ra
from agentsession_operator.issuer import Issuer, SigningKey, Target
from agentsession_operator.issuer.issuer import parse_requests
from agentsession_operator.issuer.tokens import verification_keys

NOW = 1_800_000_000


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def test_a_token_is_upstreams_v2_signed_over_the_key_id_and_payload() -> None:
    key = SigningKey(Ed25519PrivateKey.generate(), "k-1")
    token = key.mint(Target("team-a", "sb", "uid-1", 8888, "POST", "/execute"), NOW + 300)
    version, kid, payload, signature = token.split(".")
    assert (version, kid) == ("v2", "k-1")
    assert json.loads(_unb64(payload)) == {
        "ns": "team-a",
        "name": "sb",
        "uid": "uid-1",
        "port": 8888,
        "method": "POST",
        "path": "/execute",
        "exp": NOW + 300,
    }
    public = key.private.public_key()
    public.verify(_unb64(signature), f"{ra.SCOPED_TOKEN_SIGNING_CONTEXT}k-1.{payload}".encode())
    keys = json.loads(verification_keys([key]))["keys"]
    assert keys[0]["kid"] == "k-1" and _unb64(keys[0]["publicKey"]) == public.public_bytes_raw()


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ([], "JSON object"),
        ({"port": "8888", "requests": [{"method": "GET", "path": "/"}]}, "port"),
        ({"port": 8888, "requests": []}, "requests"),
        ({"port": 8888, "requests": [{"method": "GET", "path": "/"}] * (ra.MAX_REQUESTS + 1)}, "requests"),
        ({"port": 8888, "requests": [{"method": "TRACE", "path": "/"}]}, "method"),
        ({"port": 8888, "requests": [{"method": "GET", "path": "/a?b=c"}]}, "path"),
        ({"port": 8888, "requests": [{"method": "GET", "path": "/a%2Fb"}]}, "path"),
        ({"port": 0, "requests": [{"method": "GET", "path": "/"}]}, "port"),
    ],
)
def test_a_bad_request_says_what_to_fix(body: Any, why: str) -> None:
    answer = parse_requests(body)
    assert isinstance(answer, str) and why in answer


def _owned(kind: str, name: str, uid: str) -> dict[str, Any]:
    return {"kind": kind, "name": name, "uid": uid, "controller": True}


class FakeAPI:
    def __init__(self, *, user: bool = True, allowed: bool = True, claim_owner: str = "session-uid") -> None:
        self.user, self.allowed = user, allowed
        self.asked: list[str] = []
        self.session = {"metadata": {"name": "s", "uid": "session-uid"}, "status": {"sandboxName": "s"}}
        self.claim = {
            "metadata": {"name": "s", "uid": "claim-uid", "ownerReferences": [_owned("AgentSession", "s", claim_owner)]}
        }
        self.sandbox = {
            "metadata": {
                "name": "s",
                "uid": "sandbox-uid",
                "ownerReferences": [_owned("SandboxClaim", "s", "claim-uid")],
            }
        }

    async def review_token(self, token: str) -> dict[str, Any] | None:
        self.asked.append("tokenreview")
        return (
            {"username": "system:serviceaccount:agents:app", "groups": ["system:authenticated"]} if self.user else None
        )

    async def user_may(self, user: dict[str, Any], attributes: dict[str, str]) -> bool:
        self.asked.append(f"sar {attributes['verb']} {attributes['resource']}/{attributes['subresource']}")
        return self.allowed

    async def get_session(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self.session is None:
            return None  # deleted: a live read finds nothing (not counted: the tests count reads of a session)
        self.asked.append("session")
        return self.session if name == "s" else None

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.claim

    async def get_sandbox(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.sandbox


BODY = {"port": 8888, "requests": [{"method": "POST", "path": "/execute"}, {"method": "GET", "path": "/"}]}


def _answer(api: FakeAPI, bearer: str | None = "t", name: str = "s") -> Any:
    issuer = Issuer(api, SigningKey(Ed25519PrivateKey.generate(), "k"), 300, clock=lambda: NOW)
    return asyncio.run(issuer.answer(bearer, "team-a", name, BODY))


def test_tokens_for_a_caller_rbac_allows_name_the_sessions_own_sandbox() -> None:
    api = FakeAPI()
    answer = _answer(api)
    assert answer.status == 200, answer.body
    assert answer.body["sandboxUID"] == "sandbox-uid" and answer.body["expires"] == NOW + 300
    assert len(answer.body["tokens"]) == 2
    claims = json.loads(_unb64(answer.body["tokens"][0].split(".")[2]))
    assert (claims["uid"], claims["method"], claims["path"]) == ("sandbox-uid", "POST", "/execute")
    assert "sar create agentsessions/connect" in api.asked


@pytest.mark.parametrize(
    ("api", "bearer", "status"),
    [
        (FakeAPI(), None, 401),
        (FakeAPI(user=False), "t", 401),
        (FakeAPI(allowed=False), "t", 403),
    ],
    ids=["no-bearer", "unauthenticated", "rbac-denies"],
)
def test_nothing_about_a_session_is_read_before_rbac_allows(api: FakeAPI, bearer: str | None, status: int) -> None:
    answer = _answer(api, bearer)
    assert answer.status == status and "tokens" not in answer.body
    assert "session" not in api.asked


def test_a_sandbox_the_status_names_but_the_session_does_not_own_gets_nothing() -> None:
    """A status can be written by more than the operator: the Sandbox must be the session's by UID."""
    answer = _answer(FakeAPI(claim_owner="another-session-uid"))
    assert answer.status == 409 and "tokens" not in answer.body


def test_a_missing_session_is_404_only_for_callers_rbac_allows() -> None:
    assert _answer(FakeAPI(), name="gone").status == 404


def test_a_token_life_the_clients_would_renew_at_once_is_refused(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentsession_operator import cli
    from agentsession_operator.issuer.tokens import private_pem

    key = tmp_path / "key.pem"
    key.write_bytes(private_pem(Ed25519PrivateKey.generate()))
    for argv, said in (
        (["--router-token-ttl=60"], "--router-token-ttl 60: at least 120 seconds"),
        (["--router-issuer-configmap=just-a-name"], "--router-issuer-configmap 'just-a-name': expected NAMESPACE/NAME"),
    ):  # usage errors at parse time (exit 2, with the usage), as every other flag's
        with pytest.raises(SystemExit) as exited:
            cli.parse_args([f"--router-token-key-file={key}", *argv])
        assert exited.value.code == 2
        assert said in capsys.readouterr().err
    config = cli.parse_args([f"--router-token-key-file={key}"]).issuer_config()
    assert config is not None and (config.ttl, config.port) == (300, 9444)
    assert config.published_url() == "https://127.0.0.1:9444"  # --bind's default, outside a cluster


def test_a_second_call_reads_only_the_session_and_a_deleted_one_is_refused_at_once() -> None:
    """A download above the inline budget asks for its own token each time: the API's answers about the caller
    and the lineage are reused for a few seconds, the session itself is read every time."""
    api = FakeAPI()
    issuer = Issuer(api, SigningKey(Ed25519PrivateKey.generate(), "k"), 300, clock=lambda: NOW)

    async def run() -> list[int]:
        first = await issuer.answer("t", "team-a", "s", BODY)
        second = await issuer.answer("t", "team-a", "s", BODY)
        api.session = None  # deleted
        third = await issuer.answer("t", "team-a", "s", BODY)
        return [first.status, second.status, third.status]

    assert asyncio.run(run()) == [200, 200, 404]
    assert api.asked.count("tokenreview") == 1
    assert api.asked.count("session") == 2  # the deleted one is not even counted: it is gone


def test_a_refusal_is_never_remembered() -> None:
    api = FakeAPI(allowed=False)
    issuer = Issuer(api, SigningKey(Ed25519PrivateKey.generate(), "k"), 300, clock=lambda: NOW)

    async def run() -> list[int]:
        first = await issuer.answer("t", "team-a", "s", BODY)
        api.allowed = True  # the Role is granted
        second = await issuer.answer("t", "team-a", "s", BODY)
        return [first.status, second.status]

    assert asyncio.run(run()) == [403, 200]


def test_what_the_watches_hold_is_read_before_the_api() -> None:
    """The operator's cache (sessions, claims, Sandboxes) answers the lineage: a remembered caller's issuance
    costs no API call; a session the cache lacks (not watched here, or deleted) is read live."""
    from types import SimpleNamespace

    api = FakeAPI()
    seen = SimpleNamespace(
        sessions={("team-a", "s"): api.session},
        claims={("team-a", "s"): api.claim},
        sandboxes={("team-a", "s"): api.sandbox},
    )
    issuer = Issuer(api, SigningKey(Ed25519PrivateKey.generate(), "k"), 300, clock=lambda: NOW, seen=seen)

    async def run() -> list[int]:
        first = await issuer.answer("t", "team-a", "s", BODY)
        second = await issuer.answer("t", "team-a", "s", BODY)
        seen.sessions.clear()
        api.session = None  # type: ignore[assignment]
        gone = await issuer.answer("t", "team-a", "s", BODY)
        return [first.status, second.status, gone.status]

    assert asyncio.run(run()) == [200, 200, 404]
    assert api.asked == ["tokenreview", "sar create agentsessions/connect"]  # the deleted one: read live, gone
