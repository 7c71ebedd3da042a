"""The local registry's pure parts: reference mapping and containerd's hosts.toml files."""

from __future__ import annotations

import tomllib

import pytest

from devcluster import registry


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("registry.k8s.io/pause:3.10", ("registry.k8s.io", "pause", "3.10")),
        (
            "registry.k8s.io/agent-sandbox/python-runtime-sandbox:v1.0.3",
            ("registry.k8s.io", "agent-sandbox/python-runtime-sandbox", "v1.0.3"),
        ),
        ("ghcr.io/agentsession/operator:0.1.0", ("ghcr.io", "agentsession/operator", "0.1.0")),
        ("python:3.11-slim-bookworm", ("docker.io", "library/python", "3.11-slim-bookworm")),
        ("docker.io/library/python:3.11-slim-bookworm", ("docker.io", "library/python", "3.11-slim-bookworm")),
        ("busybox", ("docker.io", "library/busybox", "latest")),
        ("someone/tool", ("docker.io", "someone/tool", "latest")),
        ("localhost:5000/a/b:c", ("localhost:5000", "a/b", "c")),
        ("localhost/devcluster/python:3.13-slim-trixie", ("localhost", "devcluster/python", "3.13-slim-trixie")),
    ],
)
def test_split_reference(ref: str, expected: tuple[str, str, str]) -> None:
    assert registry.split_reference(ref) == expected


def test_digest_references_are_refused() -> None:
    with pytest.raises(ValueError):
        registry.split_reference("registry.k8s.io/pause@sha256:" + "0" * 64)


def test_local_reference_drops_the_upstream_host_and_keeps_the_path() -> None:
    local = "127.0.0.1:5000"
    assert (
        registry.local_reference("registry.k8s.io/agent-sandbox/python-runtime-sandbox:v1.0.3", local)
        == "127.0.0.1:5000/agent-sandbox/python-runtime-sandbox:v1.0.3"
    )
    python = registry.local_reference("python:3.11-slim-bookworm", local)
    assert python == "127.0.0.1:5000/library/python:3.11-slim-bookworm"


def test_hosts_toml_sends_every_registry_to_the_local_one_over_http_with_no_fallback() -> None:
    files = registry.containerd_registry_hosts("127.0.0.1:5000")
    assert set(files) == {f"{name}/hosts.toml" for name in ("registry.k8s.io", "ghcr.io", "docker.io", "_default")}
    for text in files.values():
        hosts = tomllib.loads(text)
        # server is the local registry too: a missing image must not be fetched from the internet.
        assert hosts["server"] == "http://127.0.0.1:5000"
        assert hosts["host"] == {"http://127.0.0.1:5000": {"capabilities": ["pull", "resolve"]}}


def test_write_containerd_hosts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    registry.write_containerd_hosts(tmp_path, "127.0.0.1:5001")
    text = (tmp_path / "registry.k8s.io" / "hosts.toml").read_text()
    assert 'server = "http://127.0.0.1:5001"' in text


def test_registry_config_listens_on_the_given_loopback_address(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import yaml

    config = yaml.safe_load(registry.config_yaml(tmp_path / "data", "127.0.0.1:5002"))
    assert config["http"]["addr"] == "127.0.0.1:5002"
    assert config["storage"]["filesystem"]["rootdirectory"] == str(tmp_path / "data")
