"""`kubectl agentsession`: argument parsing and output formatting (no cluster)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import yaml

from langchain_k8s_client.cli.output import age, render
from langchain_k8s_client.cli.parser import build_parser, parse, split_remote

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def session(name: str = "demo", **status: object) -> dict[str, object]:
    return {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSession",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "creationTimestamp": "2026-12-01T11:55:00Z",
            "managedFields": [{"manager": "x"}],
        },
        "spec": {"warmPoolRef": {"name": "python-pool"}},
        "status": status,
    }


def test_kubectl_flags_before_and_after_the_verb() -> None:
    args = build_parser().parse_args(["-n", "a", "list", "--context", "c", "-o", "wide"])
    assert (args.command, args.namespace, args.context, args.output) == ("list", "a", "c", "wide")
    assert parse(["list"]).request_timeout == 180 and parse(["list"]).namespace is None
    args = build_parser().parse_args(["get", "demo", "--namespace", "b", "--kubeconfig", "/k", "-o", "json"])
    assert (args.namespace, args.kubeconfig, args.name, args.output) == ("b", "/k", "demo", "json")


def test_exec_keeps_everything_after_the_double_dash() -> None:
    args = parse(["exec", "demo", "-n", "a", "--", "sh", "-c", "exit 3", "-n"])
    assert args.cmd == ["sh", "-c", "exit 3", "-n"]
    assert args.namespace == "a"
    with pytest.raises(SystemExit):
        parse(["list", "--", "ls"])


def test_create_flags() -> None:
    args = build_parser().parse_args(
        ["create", "x", "--warm-pool", "p", "--ttl", "2h", "--env", "A=1", "--env", "B=x=y", "--storage", "1Gi"]
    )
    assert args.env == [("A", "1"), ("B", "x=y")] and args.storage == "1Gi" and args.ttl == "2h"


def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["list", "-o", "xml"], ["create", "x", "--env", "novalue"], ["frobnicate"], []):
        with pytest.raises(SystemExit) as info:
            build_parser().parse_args(argv)
        assert info.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    assert "kubectl agentsession exec demo" in out and "exit codes" in out


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("demo:/workspace/a", ("demo", "/workspace/a")),
        ("./a:b", (None, "./a:b")),
        ("/tmp/x", (None, "/tmp/x")),
        ("local", (None, "local")),
    ],
)
def test_split_remote(spec: str, expected: tuple[str | None, str]) -> None:
    assert split_remote(spec) == expected


def test_age_like_kubectl() -> None:
    assert age("2026-12-01T11:59:18Z", NOW) == "42s"
    assert age("2026-12-01T09:00:00Z", NOW) == "3h"
    assert age("2026-11-28T12:00:00Z", NOW) == "3d"
    assert age(None, NOW) == "<unknown>"


def test_table_and_wide() -> None:
    items = [
        session(
            phase="Ready",
            podIPs=["127.1.0.5"],
            podName="p",
            claimName="c",
            conditions=[{"type": "Ready", "status": "True", "reason": "SandboxReady"}],
        ),
        session("other"),
    ]
    lines = render(items, None, single=False, now=NOW).splitlines()
    assert lines[0].split() == ["NAME", "PHASE", "POOL", "POD-IP", "EXPIRES", "AGE"]
    assert lines[1].split() == ["demo", "Ready", "python-pool", "127.1.0.5", "<none>", "5m"]
    assert lines[2].split()[:2] == ["other", "Pending"]
    wide = render(items, "wide", single=False, now=NOW).splitlines()
    assert wide[0].split()[-3:] == ["POD", "CLAIM", "REASON"] and wide[1].split()[-3:] == ["p", "c", "SandboxReady"]
    assert render([], None, single=False, now=NOW) == ""


def test_json_yaml_name_without_managed_fields() -> None:
    one = json.loads(render([session()], "json", single=True, now=NOW))
    assert one["metadata"]["name"] == "demo" and "managedFields" not in one["metadata"]
    many = yaml.safe_load(render([session(), session("b")], "yaml", single=False, now=NOW))
    assert many["kind"] == "List" and [i["metadata"]["name"] for i in many["items"]] == ["demo", "b"]
    assert render([session()], "name", single=True, now=NOW) == "agentsessions.agentsession.dev/demo\n"


def test_version_needs_no_verb_and_no_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    import agentsession_api
    import langchain_k8s_client

    with pytest.raises(SystemExit) as exit_info:
        parse(["--version"])
    assert exit_info.value.code == 0
    version, api = langchain_k8s_client.__version__, agentsession_api.__version__
    assert capsys.readouterr().out.strip() == f"kubectl agentsession {version} (agentsession-api {api})"
    assert version != "0+unknown"


def test_waiting_shows_each_step_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 52 item 4: `create --wait` and `resume --wait` say why a session is not Ready yet, not only its
    phase: each new phase or Ready reason/message once, on stderr."""
    import importlib

    main = importlib.import_module("langchain_k8s_client.cli.main")

    def waiting(reason: str) -> dict[str, object]:
        cond = {
            "type": "Ready",
            "status": "False",
            "reason": reason,
            "message": "m",
            "lastTransitionTime": "2026-12-01T11:55:00Z",
        }
        return {
            **session(phase="Pending", conditions=[cond]),
            "metadata": {"name": "demo", "namespace": "a", "uid": "u"},
        }

    ready = {
        **session(phase="Ready", podIPs=["10.0.0.1"], podName="p"),
        "metadata": {"name": "demo", "namespace": "a", "uid": "u"},
    }
    bodies = iter([waiting("WaitingForPool"), waiting("WaitingForPool"), waiting("ClaimPending"), ready])

    class Store:
        def get(self, namespace: str, name: str) -> object:
            return next(bodies)

    monkeypatch.setattr(main.time, "sleep", lambda _s: None)
    view = main.wait_phase(Store(), "a", "demo", "Ready", 30)  # type: ignore[arg-type]
    assert view is not None and view.ready
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" after ")[0] for line in lines] == [
        "agentsession/demo: Pending (WaitingForPool: m)",
        "agentsession/demo: Pending (ClaimPending: m)",
        "agentsession/demo: Ready",
    ]
