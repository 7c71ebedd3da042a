"""What the Python client sends and computes for the cases on stdin (JSON lists, one a line), as JSON lines.

test/cross-language.test.ts runs this with the repository's venv and compares the TypeScript client's
answers byte for byte: the same in-pod scripts, the same session names, the same activity values, the same
pod identity tokens accepted and refused.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from unittest import mock

import httpx

from agentsession_api.activity import format_activity
from langchain_k8s_client import (
    MalformedResponse,
    UnverifiedPod,
    commands,
    gnu_grep,
    limits,
    manager,
    pod_identity,
    probe,
    protocol,
    pyscripts,
    transport,
    wire,
)
from langchain_k8s_client.paths import PathPolicy, PathRefused
from langchain_k8s_client.sessions import SessionSpec


def identity_tokens(a: dict) -> list[dict]:
    """Per kind of key, the cluster's keys and tokens signed as tests/unit/client/fakes.ClusterSigner signs them."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: its tests package
    from tests.unit.client.fakes import ClusterSigner

    out = []
    for kind in ("EC", "RSA"):
        signer, other = ClusterSigner(kind), ClusterSigner(kind)  # the same key ID, another key
        tokens = []
        for spec in a["specs"]:
            by = other if spec.get("forged") else signer
            options = {k: spec[k] for k in ("audience", "lifetime") if k in spec}
            tokens.append(by.token(spec["namespace"], spec["pod"], issued=a["now"] + spec.get("offset", 0), **options))
        out.append({"jwks": signer.jwks(), "tokens": tokens})
    return out


def identity_verdicts(a: dict) -> list[str]:
    """For each token: "ok" when it proves the pod is the session's (the keys given), else the refusal's message."""
    identity = pod_identity.PodIdentity(a["namespace"], a["pod"], pod_identity.ClusterKeys.parse(a["jwks"]))
    verdicts = []
    for token in a["tokens"]:
        try:
            identity.check(token, now=a["now"])
            verdicts.append("ok")
        except UnverifiedPod as refusal:
            verdicts.append(str(refusal))
    return verdicts


def content_coding_verdict(lines: list[str]) -> str:
    """ "read" or "refused": what the client's reader (limits) does with an answer carrying these
    Content-Encoding lines, before reading its body."""
    # As the pod's transport hands them over: bytes, decoded by httpx (ASCII, else UTF-8, else Latin-1).
    headers = [(b"Content-Encoding", line.encode("utf-8")) for line in lines]
    resp = httpx.Response(200, headers=headers, stream=httpx.ByteStream(b"{}"))
    try:
        limits._refuse_coded(resp, wire.execute_request("true", read_timeout=1.0, idempotent=False))
    except MalformedResponse:
        return "refused"
    return "read"


def retry_delays(a: dict) -> list[float]:
    """RetryPolicy().delay(retry) with random.random() answering each of `randoms`."""
    out = []
    for retry in a["retries"]:
        for value in a["randoms"]:
            with mock.patch.object(transport.random, "random", return_value=value):
                out.append(transport.RetryPolicy().delay(retry))
    return out


def answer(case: dict) -> object:
    op, a = case["op"], case.get("args", {})
    if op == "protocol":
        from agentsession_api import router_access  # generated into the same file (protocol_tsgen)

        constants = {**vars(protocol), **vars(router_access)}
        return {name: value for name, value in constants.items() if name.isupper() and not name.startswith("_")}
    if op == "content_codings":
        return [[protocol.content_codings_readable(lines), content_coding_verdict(lines)] for lines in a["cases"]]
    if op == "retry_delays":
        return retry_delays(a)
    if op == "probe":
        return probe.build_probe()
    if op == "probe_identity":
        info = probe.parse_probe(a["stdout"])
        return {
            "hostname": info.hostname,
            "addresses": list(info.addresses),
            "judged": [[info.shows_family_of(ip), info.holds(ip)] for ip in a["ips"]],
        }
    if op == "user_command":
        wrapped = commands.user_command(a.pop("command"), **a)
        return {"inline": wrapped.inline(), "staged": wrapped.staged(), "wrapper": wrapped.wrapper}
    if op == "parse_user_command":
        parsed = commands.parse_user_command(a["stdout"], a["stderr"], a["exit_code"], **a["options"])
        return {"output": parsed.output, "exitCode": parsed.exit_code, "timedOut": parsed.timed_out}
    if op == "upload_finalize":
        return commands.build_upload_finalize([tuple(item) for item in a["items"]])
    if op == "download_prepare":
        items = [tuple(item) for item in a.pop("items")]
        return commands.build_download_prepare(items, **a)
    if op == "remove":
        return commands.build_remove(a["paths"])
    if op == "ls":
        return pyscripts.build_ls(a["path"], a["confine"])
    if op == "edit":
        payload = pyscripts.edit_payload(a["path"], a["old"], a["new"], replace_all=a["all"], confine=a["confine"])
        return pyscripts.build_edit(pyscripts.encode_payload(payload))
    if op == "delete":
        return commands.build_delete(a["path"], a["confine"])
    if op == "confine":
        return commands.build_confine_check(a["path"], a["confine"])
    if op == "gnu_grep":
        fits = gnu_grep.gnu_grep_fits(a["root"], a["exclude_dirs"], a["glob"], a["confine"])
        command = gnu_grep.build_gnu_grep(
            a["alternatives"], a["root"], exclude_dirs=a["exclude_dirs"], cap=a["cap"], tag=a["tag"]
        )
        return {"fits": fits, "command": command}
    if op == "stop_search":
        return gnu_grep.build_stop_search(a["tag"])
    if op == "grep":
        try:
            return pyscripts.build_grep(
                a["pattern"],
                a["path"],
                a["glob"],
                max_count=a["max"],
                exclude_dirs=a["exclude_dirs"],
                confine=a["confine"],
            )
        except ValueError as exc:
            return {"error": str(exc)}
    if op == "gnu_grep_rows":
        rows = gnu_grep.gnu_grep_rows(a["stdout"])
        if rows is None:
            rows = [(r.path, str(r.line), r.text) for r in gnu_grep.parse_gnu_grep_slowly(a["stdout"])[0]]
        return [[p, int(n), t] for p, n, t in rows]
    if op == "policy":
        try:
            policy = PathPolicy(**a["rules"])
        except ValueError as exc:
            return {"rules_error": str(exc)}
        out = []
        for path, write in a["paths"]:
            try:
                r = policy.resolve(path, write=write)
                out.append(
                    {"virtual": r.virtual, "real": r.real, "confine": r.confine, "shown": policy.display(r.real)}
                )
            except PathRefused as refusal:
                out.append({"code": refusal.code, "message": refusal.message})
        return out
    if op == "session_name":
        return manager.session_name(a["thread_id"], a.get("prefix", "thread"))
    if op == "thread_hash":
        return manager.thread_hash(a["thread_id"])
    if op == "activity":
        return format_activity(dt.datetime.fromisoformat(a["at"]), a["busy"])
    if op == "to_spec":
        return SessionSpec(**a).to_spec()
    if op == "identity_tokens":
        return identity_tokens(a)
    if op == "identity_verdicts":
        return identity_verdicts(a)
    raise ValueError(f"unknown case {op!r}")


if __name__ == "__main__":
    for line in sys.stdin:  # one JSON list of cases per line, one JSON list of answers per line
        sys.stdout.write(json.dumps([answer(case) for case in json.loads(line)], ensure_ascii=True) + "\n")
        sys.stdout.flush()
