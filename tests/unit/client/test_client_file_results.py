"""file_results: the plans' order, and each raw runtime answer mapped to its deepagents result."""

from __future__ import annotations

import json

from langchain_k8s_client import file_results
from langchain_k8s_client.paths import PathRefused, ResolvedPath
from langchain_k8s_client.runtime import Downloaded
from langchain_k8s_client.wire import RuntimeExec


def _raw(stdout: str = "", stderr: str = "", exit_code: int = 0) -> RuntimeExec:
    return RuntimeExec(stdout=stdout, stderr=stderr, exit_code=exit_code)


def test_upload_plan_keeps_the_callers_order() -> None:
    plan = file_results.UploadPlan(
        paths=["/a", "/b", "/c"],
        items=[("/a", b"1", ""), ("/c", b"3", "")],
        positions=[0, 2],
        refused={1: PathRefused("permission_denied", "outside")},
    )
    out = plan.finish([None, "file_not_found"])
    assert [(r.path, r.error) for r in out] == [("/a", None), ("/b", "permission_denied"), ("/c", "file_not_found")]


def test_download_plan_keeps_the_callers_order() -> None:
    plan = file_results.DownloadPlan(
        paths=["/x", "/y"], items=[("/y", "")], positions=[1], refused={0: PathRefused("invalid_path", "..")}
    )
    out = plan.finish([Downloaded(content=b"y", error=None)])
    assert [(r.path, r.content, r.error) for r in out] == [("/x", None, "invalid_path"), ("/y", b"y", None)]


def test_edit_result_messages() -> None:
    ok = file_results.edit_result(_raw(json.dumps({"count": 2}) + "\n"), "/f", "old")
    assert (ok.path, ok.occurrences, ok.error) == ("/f", 2, None)
    missing = file_results.edit_result(_raw(json.dumps({"error": "string_not_found"})), "/f", "old")
    assert missing.error == "Error: String not found in file: 'old'"
    odd = file_results.edit_result(_raw(json.dumps({"error": "weird", "detail": "d"})), "/f", "old")
    assert odd.error == "Error editing file '/f': weird d"
    garbage = file_results.edit_result(_raw("not json", exit_code=1), "/f", "old")
    assert garbage.error == "Error editing file '/f': not json"


def test_delete_result_markers() -> None:
    assert file_results.delete_result(_raw("@X ok\n"), "/f").path == "/f"
    assert file_results.delete_result(_raw("@X file_not_found\n"), "/f").error == "Error: '/f' not found"
    assert file_results.delete_result(_raw("", "boom", 2), "/f").error == "Error deleting file '/f': boom"


def test_failure_names_a_missing_python() -> None:
    assert file_results.failure(_raw(stderr="sh: python3: not found", exit_code=127)) == (
        "python3 is not installed in the sandbox image"
    )
    assert file_results.failure(_raw(exit_code=3)) == "exit code 3"


def test_write_result_and_read_mapping() -> None:
    from deepagents.backends.protocol import FileUploadResponse, ReadResult

    assert file_results.write_result("/f", [FileUploadResponse(path="/f", error=None)]).path == "/f"
    failed = file_results.write_result("/f", [FileUploadResponse(path="/f", error="is_directory")])
    assert failed.error == "Failed to write file '/f': is_directory"
    resolved = ResolvedPath(virtual="/v/f", real="/root/v/f", confine="/root")
    mapped = file_results.map_read(ReadResult(error="File '/root/v/f' not found"), resolved)
    assert mapped.error == "File '/v/f' not found"


def test_not_utf8() -> None:
    assert file_results.not_utf8("/a/\udcff")
    assert not file_results.not_utf8("/a/é")
