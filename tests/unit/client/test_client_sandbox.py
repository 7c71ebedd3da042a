"""PodSandbox over a scripted runtime: options, error mapping, hooks, path mapping."""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from deepagents.backends.protocol import FileDownloadResponse, FileUploadResponse, SandboxBackendProtocol
from deepagents.backends.utils import EMPTY_OLD_STRING_ERROR

from langchain_k8s_client.errors import SandboxError
from langchain_k8s_client.pod_sandbox import PodSandbox

from .fakes import FakeRuntime, plain, wrapped


def test_is_a_deepagents_sandbox_with_its_id() -> None:
    backend = FakeRuntime().sandbox()
    assert isinstance(backend, SandboxBackendProtocol)
    assert backend.id == "fake"
    with pytest.raises(ValueError, match="endpoint or a transport"):
        PodSandbox(sandbox_id="x")


@pytest.mark.parametrize("bad", [{"command_timeout": 3601}, {"command_timeout": -5}, {"max_output_size": 0}])
def test_options_are_validated(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        FakeRuntime().sandbox(**bad)


@pytest.mark.parametrize(("timeout", "sent"), [(None, "300"), (0, "3600"), (5, "5"), (3600, "3600")])
def test_timeout_reaches_the_pod(timeout: int | None, sent: str) -> None:
    fake = FakeRuntime(answers=[wrapped()])
    fake.sandbox().execute("true", timeout=timeout)
    assert fake.argvs()[0][4] == sent
    read_timeout = fake.requests[-1].extensions["timeout"]["read"]
    assert read_timeout == int(sent) + 30.0


def test_command_timeout_and_max_output_options() -> None:
    fake = FakeRuntime(answers=[wrapped(b"abcdef")])
    result = fake.sandbox(command_timeout=9, max_output_size=3).execute("x")
    assert fake.argvs()[0][4:6] == ["9", "4"]
    assert (result.output, result.truncated) == ("abc", True)


def test_on_activity_runs_once_per_operation_and_can_veto() -> None:
    calls: list[float | None] = []
    fake = FakeRuntime(answers=[wrapped(), wrapped(b'{"encoding": "utf-8", "content": "x"}')])
    backend = fake.sandbox(on_activity=calls.append)
    backend.execute("true", timeout=12)
    backend.read("/f")  # BaseSandbox.read calls execute() inside
    assert calls == [12.0, None]

    def veto(_: float | None) -> None:
        raise SandboxError("session expired")

    fake = FakeRuntime()
    with pytest.raises(SandboxError, match="expired"):
        fake.sandbox(on_activity=veto).execute("rm -rf /data")
    assert fake.requests == []


async def test_on_activity_async() -> None:
    calls: list[float | None] = []
    fake = FakeRuntime(answers=[wrapped(), plain('{"n": "a", "d": false}\n{"done": 1}\n')])
    backend = fake.sandbox(on_activity=calls.append)
    await backend.aexecute("true")
    await backend.als("/x")
    assert calls == [300.0, None]


def test_upload_refusals_stay_local_and_order_is_kept() -> None:
    fake = FakeRuntime(answers=[httpx.Response(200), httpx.Response(200), plain("@U ok\n@U is_directory\n")])
    results = fake.sandbox(allow_prefixes=["/work"]).upload_files(
        [("/work/a", b"1"), ("relative", b"2"), ("/etc/x", b"3"), ("/work/dir", b"4")]
    )
    assert results == [
        FileUploadResponse("/work/a", None),
        FileUploadResponse("relative", "invalid_path"),
        FileUploadResponse("/etc/x", "permission_denied"),
        FileUploadResponse("/work/dir", "is_directory"),
    ]
    assert fake.paths().count("POST /upload") == 2


def test_download_maps_results_back_in_order() -> None:
    stdout = "@D inline 2\n" + base64.b64encode(b"hi").decode() + "\n@D file_not_found\n"
    fake = FakeRuntime(answers=[plain(stdout)])
    results = fake.sandbox().download_files(["/a", "rel", "/b"])
    assert results == [
        FileDownloadResponse("/a", b"hi", None),
        FileDownloadResponse("rel", None, "invalid_path"),
        FileDownloadResponse("/b", None, "file_not_found"),
    ]


def test_empty_batches_make_no_request() -> None:
    fake = FakeRuntime()
    backend = fake.sandbox()
    assert backend.upload_files([]) == []
    assert backend.download_files([]) == []
    assert fake.requests == []


def test_write_is_one_upload_with_clear_errors() -> None:
    fake = FakeRuntime(answers=[httpx.Response(200), plain("@U permission_denied\n")])
    backend = fake.sandbox(allow_prefixes=["/w"])
    assert backend.write("/w/f", "x").error == "Failed to write file '/w/f': permission_denied"
    refused = backend.write("/etc/passwd", "x").error or ""
    assert "permission_denied" in refused and "/w" in refused
    assert fake.paths() == ["POST /execute", "POST /upload", "POST /execute"]


def test_edit_small_payload_is_one_command() -> None:
    fake = FakeRuntime(answers=[plain('{"count": 2}\n')])
    result = fake.sandbox().edit("/f", "a", "b", replace_all=True)
    assert (result.path, result.occurrences) == ("/f", 2)
    argv = fake.argvs()[0]
    assert argv[:3] == ["python3", "-S", "-c"]
    assert json.loads(argv[4]) == {"p": "/f", "o": "a", "n": "b", "a": True, "r": ""}


def test_edit_large_payload_is_staged_first() -> None:
    fake = FakeRuntime(answers=[httpx.Response(200), plain('{"count": 1}\n')])
    assert fake.sandbox().edit("/f", "a", "b" * 100_000).occurrences == 1
    assert fake.paths() == ["POST /execute", "POST /upload", "POST /execute"]
    assert fake.argvs()[0][4].startswith("/app/.lkc-staging/in-")


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ('{"error": "file_not_found"}', "Error: File '/f' not found"),
        ('{"error": "string_not_found"}', "Error: String not found in file: 'a'"),
        ('{"error": "multiple_occurrences", "count": 3}', "appears multiple times (3 occurrences)"),
        ('{"error": "os_error", "detail": "EIO"}', "Error editing file '/f': os_error EIO"),
        ("Traceback: boom", "Error editing file '/f': Traceback: boom"),
    ],
)
def test_edit_error_messages(answer: str, message: str) -> None:
    fake = FakeRuntime(answers=[plain(answer)])
    assert message in (fake.sandbox().edit("/f", "a", "b").error or "")


def test_edit_refusals_need_no_request() -> None:
    fake = FakeRuntime()
    backend = fake.sandbox(allow_prefixes=["/w"])
    assert backend.edit("/w/f", "", "x").error == EMPTY_OLD_STRING_ERROR
    assert "permission_denied" in (backend.edit("/x", "a", "b").error or "")
    assert fake.requests == []


def test_delete_results_and_root_refusal() -> None:
    fake = FakeRuntime(answers=[plain("@X ok\n"), plain("@X file_not_found\n"), plain("garbage", "boom", 1)])
    backend = fake.sandbox()
    assert backend.delete("/a").path == "/a"
    assert backend.delete("/b").error == "Error: '/b' not found"
    assert "boom" in (backend.delete("/c").error or "")
    assert "refusing" in (backend.delete("/").error or "")
    virtual = FakeRuntime().sandbox(virtual_mode=True, root_dir="/ws")
    assert "refusing" in (virtual.delete("/").error or "")


def test_ls_is_sorted_and_reports_a_missing_python() -> None:
    fake = FakeRuntime(
        answers=[
            plain('{"n": "b", "d": true}\n{"n": "a", "d": false, "s": 3, "m": 0}\n{"done": 1}\n'),
            plain("", "Failed to execute command: [Errno 2] No such file or directory: 'python3'", 1),
            plain('{"error": "path_not_found"}\n'),
        ]
    )
    backend = fake.sandbox()
    assert backend.ls("/d/").entries == [
        {"path": "/d/a", "is_dir": False, "size": 3, "modified_at": "1970-01-01T00:00:00+00:00"},
        {"path": "/d/b", "is_dir": True},
    ]
    missing = "Path '/d': ls failed in the sandbox: python3 is not installed in the sandbox image"
    assert backend.ls("/d").error == missing
    assert backend.ls("/d").error == "Path '/d': path_not_found"


def test_grep_defaults_to_the_working_directory_and_caps() -> None:
    records = "".join(json.dumps({"p": f"/app/f{i}", "l": i, "t": "x"}) + "\n" for i in range(3))
    fake = FakeRuntime(answers=[plain(records + '{"done": 1, "trunc": 0}\n'), plain("")])
    backend = fake.sandbox()
    result = backend.grep("x", max_count=2)
    assert result.truncated is True
    assert result.matches == [{"path": "/app/f0", "line": 0, "text": "x"}, {"path": "/app/f1", "line": 1, "text": "x"}]
    payload = json.loads(fake.argvs()[0][4])
    assert (payload["p"], payload["c"], payload["x"]) == ("/app", 3, [".git"])
    assert "grep failed in the sandbox" in (backend.grep("x", "/d").error or "")  # no "done": never silently empty
    assert backend.grep("x", "/d", glob="{a,b}" * 10).error is not None


def test_virtual_mode_maps_grep_ls_glob_and_offload_paths() -> None:
    grep_answer = plain(json.dumps({"p": "/ws/src/a.py", "l": 1, "t": "x"}) + '\n{"done": 1, "trunc": 0}\n')
    glob_answer = wrapped(b'{"path": "src/a.py", "is_dir": false}\n')
    fake = FakeRuntime(answers=[grep_answer, plain("@C ok\n"), glob_answer, wrapped(b"meta")])
    backend = fake.sandbox(virtual_mode=True, root_dir="/ws", enable_capture_offload=True)
    assert backend.grep("x").matches == [{"path": "/src/a.py", "line": 1, "text": "x"}]
    assert json.loads(fake.argvs()[0][4])["r"] == "/ws"
    assert [m["path"] for m in backend.glob("*.py", "/").matches or []] == ["/src/a.py"]
    backend.execute_with_offload("seq 9", "/large_tool_results/c1", max_inline_bytes=10)
    assert "__da_f=/ws/large_tool_results/c1\n" in fake.argvs()[-1][7]
    assert fake.argvs()[-1][8] == "/ws"  # commands run in the root


def test_read_maps_errors_back_to_virtual_paths() -> None:
    fake = FakeRuntime(answers=[plain("@C ok\n"), wrapped(b'{"error": "file_not_found"}')])
    backend = fake.sandbox(virtual_mode=True, root_dir="/ws")
    assert backend.read("/a.txt").error == "File '/a.txt': file_not_found"
    fake = FakeRuntime(answers=[plain("@C invalid_path\n")])
    backend = fake.sandbox(virtual_mode=True, root_dir="/ws")
    assert backend.read("/link").error == "File '/link': invalid_path"
    assert len(fake.argvs()) == 1  # deepagents' read never ran


async def test_read_and_glob_refuse_non_utf8_names_instead_of_crashing() -> None:
    fake = FakeRuntime()
    backend = fake.sandbox()
    name = "/tmp/bad-\udcff"
    assert "not UTF-8" in (backend.read(name).error or "")
    assert "not UTF-8" in (backend.glob("*", name).error or "")
    assert "not UTF-8" in ((await backend.aread(name)).error or "")
    assert "not UTF-8" in ((await backend.aglob("*", name)).error or "")
    assert fake.argvs() == []
