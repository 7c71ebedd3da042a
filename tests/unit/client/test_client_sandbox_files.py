"""sandbox_files.SandboxFiles on its own: the file operations need only a transport, a path policy,
a working directory, the activity hooks and a shell for deepagents' own glob and read (no PodSandbox)."""

from __future__ import annotations

import json

from deepagents.backends.protocol import ExecuteResponse, FileDownloadResponse, FileUploadResponse
from deepagents.backends.sandbox import BaseSandbox

from langchain_k8s_client.paths import PathPolicy
from langchain_k8s_client.sandbox_activity import ActivityHooks
from langchain_k8s_client.sandbox_files import SandboxFiles

from .fakes import FakeRuntime, plain


class _Shell(BaseSandbox):
    """Where deepagents' own glob and read scripts run: records each command and answers `answer`."""

    grep_exclude_dirs = (".git", "node_modules")

    def __init__(self, answer: str = "") -> None:
        self.commands: list[str] = []
        self.answer = answer

    @property
    def id(self) -> str:
        return "shell"

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        self.commands.append(command)
        return ExecuteResponse(output=self.answer, exit_code=0)

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        raise AssertionError("uploads go through the transport, not the shell")

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        raise AssertionError("downloads go through the transport, not the shell")


def _files(fake: FakeRuntime, shell: _Shell | None = None, **policy: object) -> tuple[SandboxFiles, list[float | None]]:
    seen: list[float | None] = []
    activity = ActivityHooks(on_activity=seen.append)
    files = SandboxFiles(shell or _Shell(), fake.transport(), PathPolicy(**policy), "", activity)  # type: ignore[arg-type]
    return files, seen


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


def test_glob_and_read_are_deepagents_own_run_on_the_shell() -> None:
    shell = _Shell()
    fake = FakeRuntime()
    files, seen = _files(fake, shell)
    files.glob("*.py", "/work")
    files.read("/work/f.py")
    assert len(shell.commands) == 2  # BaseSandbox.glob and BaseSandbox.read, each one execute() on the shell
    assert fake.requests == [] and seen == [None, None]


async def test_aglob_and_aread_run_on_the_shell_too() -> None:
    shell = _Shell()
    files, seen = _files(FakeRuntime(), shell)
    await files.aglob("*.py", "/work")
    await files.aread("/work/f.py")
    assert len(shell.commands) == 2 and seen == [None, None]


def test_grep_skips_the_shells_exclude_dirs() -> None:
    fake = FakeRuntime(answers=[plain('{"done": 1}\n')])
    files, _ = _files(fake, _Shell())
    assert files.grep("x", "/work").matches == []
    assert "node_modules" in fake.command(fake.requests[-1])
