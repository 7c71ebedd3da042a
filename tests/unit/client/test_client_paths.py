"""Path rules: validation, virtual mode mapping, allowed write prefixes."""

from __future__ import annotations

import pytest

from langchain_k8s_client.paths import PathPolicy, PathRefused, is_under, normalize


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("/", "/"), ("//a//b/", "/a/b"), ("/a/./b/.", "/a/b"), ("/a/../b", "/a/../b"), ("/x y/\nz", "/x y/\nz")],
)
def test_normalize(raw: str, expected: str) -> None:
    assert normalize(raw) == expected


def test_is_under_is_segment_wise() -> None:
    assert is_under("/a/b", "/a/b")
    assert is_under("/a/b/c", "/a/b")
    assert not is_under("/a/bc", "/a/b")
    assert is_under("/anything", "/")


@pytest.mark.parametrize("path", ["relative.txt", "", "./x", "~/x", "/a/\x00b"])
def test_every_mode_refuses_relative_empty_and_nul(path: str) -> None:
    with pytest.raises(PathRefused) as info:
        PathPolicy().resolve(path)
    assert info.value.code == "invalid_path"


def test_unrestricted_mode_passes_paths_through() -> None:
    resolved = PathPolicy().resolve("/tmp/../etc//x", write=True)
    assert (resolved.real, resolved.confine) == ("/tmp/../etc/x", "")


@pytest.mark.parametrize("path", ["/../etc/passwd", "/a/../../b", "/~", "/~root/x"])
def test_virtual_mode_refuses_traversal(path: str) -> None:
    with pytest.raises(PathRefused) as info:
        PathPolicy(virtual_mode=True, root_dir="/workspace").resolve(path)
    assert info.value.code == "invalid_path"


def test_virtual_mode_maps_both_ways() -> None:
    policy = PathPolicy(virtual_mode=True, root_dir="/workspace/")
    resolved = policy.resolve("/src//app.py")
    assert (resolved.virtual, resolved.real, resolved.confine) == ("/src/app.py", "/workspace/src/app.py", "/workspace")
    assert policy.resolve("/").real == "/workspace"
    assert policy.to_virtual("/workspace/src/app.py") == "/src/app.py"
    assert policy.to_virtual("/workspace") == "/"
    assert policy.to_virtual("/workspacex/a") is None
    assert policy.display("/etc/passwd") == "/etc/passwd"
    assert policy.resolve("/a~b/~c").real == "/workspace/a~b/~c"  # only a leading ~ looks like a home


def test_allow_prefixes_limit_writes_only() -> None:
    policy = PathPolicy(allow_prefixes=["/tmp/work/", "/data"])
    assert policy.resolve("/etc/passwd").confine == ""  # reads are free
    assert policy.resolve("/tmp/work/a/b", write=True).confine == "/tmp/work"
    assert policy.resolve("/data", write=True).confine == "/data"
    for path in ("/etc/passwd", "/tmp/workshop/x", "/tmp"):
        with pytest.raises(PathRefused) as info:
            policy.resolve(path, write=True)
        assert info.value.code == "permission_denied"
    with pytest.raises(PathRefused) as info:
        policy.resolve("/tmp/work/../../etc/passwd", write=True)
    assert info.value.code == "invalid_path"


def test_allow_prefixes_pick_the_most_specific_confinement() -> None:
    policy = PathPolicy(allow_prefixes=["/a", "/a/b/c"])
    assert policy.resolve("/a/b/c/d", write=True).confine == "/a/b/c"
    assert policy.resolve("/a/b/x", write=True).confine == "/a"


def test_allow_prefixes_are_virtual_in_virtual_mode() -> None:
    policy = PathPolicy(virtual_mode=True, root_dir="/ws", allow_prefixes=["/out"])
    assert policy.resolve("/out/x", write=True).confine == "/ws/out"
    assert policy.resolve("/in/x").confine == "/ws"
    with pytest.raises(PathRefused):
        policy.resolve("/in/x", write=True)


def test_empty_allow_prefixes_refuse_every_write() -> None:
    with pytest.raises(PathRefused) as info:
        PathPolicy(allow_prefixes=[]).resolve("/tmp/x", write=True)
    assert "(none)" in info.value.message


@pytest.mark.parametrize(
    "kwargs",
    [
        {"virtual_mode": True},
        {"virtual_mode": True, "root_dir": "relative"},
        {"virtual_mode": True, "root_dir": "/a/../b"},
        {"root_dir": "/x"},
        {"allow_prefixes": ["relative"]},
        {"allow_prefixes": ["/a/../b"]},
    ],
)
def test_bad_options_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        PathPolicy(**kwargs)  # type: ignore[arg-type]
