"""sandbox_files.SandboxFiles on its own: the file operations need only a transport, a path policy,
a working directory and the activity hooks (no PodSandbox)."""

from __future__ import annotations

import json

from deepagents.backends.protocol import ExecuteResponse

from langchain_k8s_client.paths import PathPolicy
from langchain_k8s_client.sandbox_activity import ActivityHooks
from langchain_k8s_client.sandbox_files import SandboxFiles
from langchain_k8s_client.transport import RuntimeTransport

from .fakes import FakeRuntime, plain


class _Files(SandboxFiles):
    def __init__(self, transport: RuntimeTransport, policy: PathPolicy, seen: list[float | None]) -> None:
        self._transport = transport
        self._policy = policy
        self._cwd = ""
        self._activity = ActivityHooks(on_activity=seen.append)

    @property
    def id(self) -> str:
        return "files"

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        raise AssertionError("the file operations under test run no user command")


def _files(fake: FakeRuntime, **policy: object) -> tuple[_Files, list[float | None]]:
    seen: list[float | None] = []
    return _Files(fake.transport(), PathPolicy(**policy), seen), seen  # type: ignore[arg-type]


def test_refusals_are_decided_locally_and_report_no_activity() -> None:
    files, seen = _files(FakeRuntime(), allow_prefixes=["/work"])
    assert files.write("/etc/passwd", "x").error is not None
    assert files.delete("/etc/passwd").error is not None
    assert files.upload_files([("/etc/x", b"")])[0].error == "permission_denied"
    assert seen == [None]  # the upload reports; nothing reached the pod


def test_delete_sends_one_script_and_maps_its_answer() -> None:
    fake = FakeRuntime(answers=[plain("@X ok\n")])
    files, seen = _files(fake)
    assert files.delete("/work/f").path == "/work/f"
    assert seen == [None]
    assert fake.paths()[-1] == "POST /execute"


async def test_ls_async_maps_the_listing() -> None:
    listing = "\n".join(
        [json.dumps({"n": "b", "d": False, "s": 1}), json.dumps({"n": "a", "d": True}), json.dumps({"done": 1})]
    )
    fake = FakeRuntime(answers=[plain(listing)])
    files, seen = _files(fake)
    result = await files.als("/work")
    assert [e["path"] for e in result.entries or []] == ["/work/a", "/work/b"]
    assert seen == [None]
