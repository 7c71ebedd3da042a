"""The commands of `kubectl agentsession`, over the client's public pieces."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import posixpath
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from agentsession_api import names, phases
from langchain_k8s_client.backend import AgentSessionSandbox, fork_session
from langchain_k8s_client.cli.output import render
from langchain_k8s_client.cli.parser import parse, split_remote
from langchain_k8s_client.errors import SandboxError
from langchain_k8s_client.sessions import ProgressReporter, SessionSpec, SessionStore, SessionView

GROUP, VERSION, PLURAL = names.GROUP, names.VERSION, names.SESSION_PLURAL


class CliError(Exception):
    """A failure to report on stderr with exit code 1."""


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def connect(args: argparse.Namespace) -> tuple[client.ApiClient, str]:
    """An API client for --kubeconfig/--context, and the namespace (-n, else the context's, else default)."""
    path = args.kubeconfig or None
    try:
        api_client = config.new_client_from_config(config_file=path, context=args.context)
        _, current = config.list_kube_config_contexts(config_file=path)
        if args.context:
            contexts, _ = config.list_kube_config_contexts(config_file=path)
            current = next(c for c in contexts if c["name"] == args.context)
        default_ns = (current.get("context") or {}).get("namespace") or "default"
    except config.ConfigException:
        if path or args.context:
            raise
        config.load_incluster_config()  # inside a pod with no kubeconfig
        api_client = client.ApiClient()
        default_ns = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text().strip()
    return api_client, args.namespace or default_ns


def _backend(store: SessionStore, namespace: str, name: str, args: argparse.Namespace) -> AgentSessionSandbox:
    if store.get(namespace, name) is None:  # attach only: never create from exec or cp
        raise CliError(f'agentsessions.{GROUP} "{name}" not found')
    return AgentSessionSandbox(
        name,
        namespace,
        keep=True,
        api_client=store.api_client,
        ready_timeout=args.request_timeout,
        pod_identity=args.pod_identity or "token",
    )


def wait_phase(store: SessionStore, namespace: str, name: str, phase: str, timeout: float) -> SessionView | None:
    """Poll (one GET a second) until `phase`; progress on stderr at each new step (phase, or the Ready
    condition's reason or message)."""
    deadline = time.monotonic() + timeout
    steps = ProgressReporter(lambda step: progress(str(step)))
    while True:
        body = store.get(namespace, name)
        if body is None:
            if phase == "Deleted":
                return None
            raise CliError(f'agentsessions.{GROUP} "{name}" not found')
        view = SessionView.of(body)
        steps.see(view)
        if view.phase == phase and (phase != phases.Phase.READY or view.ready):
            return view
        if view.finished and phase not in (str(p) for p in phases.TERMINAL_PHASES):
            ready = view.condition(phases.COND_READY) or view.condition(phases.COND_FAILED)
            why = f": {ready.reason}: {ready.message}" if ready else ""
            raise CliError(f"AgentSession {namespace}/{name} is {view.phase}{why}")
        if time.monotonic() >= deadline:
            raise CliError(f"timed out after {timeout:g} s waiting for {name} to be {phase} (it is {view.phase})")
        time.sleep(1)


def cmd_list(args: argparse.Namespace, store: SessionStore, ns: str) -> int:
    labels = dict(kv.split("=", 1) for kv in args.selector.split(",")) if args.selector else None
    items = store.list(ns, labels)
    if not items and args.output in (None, "wide"):
        progress(f"No resources found in {ns} namespace.")
    sys.stdout.write(render(items, args.output, single=False, now=dt.datetime.now(dt.UTC)))
    return 0


def cmd_get(args: argparse.Namespace, store: SessionStore, ns: str) -> int:
    body = store.get(ns, args.name)
    if body is None:
        raise CliError(f'agentsessions.{GROUP} "{args.name}" not found')
    sys.stdout.write(render([body], args.output, single=True, now=dt.datetime.now(dt.UTC)))
    return 0


def spec_of(args: argparse.Namespace) -> SessionSpec:
    vct = None
    if args.storage:
        vct = [
            {
                "metadata": {"name": "workspace"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": args.storage}}},
            }
        ]
    return SessionSpec(
        warm_pool=args.warm_pool,
        ttl=args.ttl,
        idle_timeout=args.idle_timeout,
        idle_action=args.idle_action,
        env=dict(args.env) or None,
        pod_labels=dict(args.pod_label) or None,
        volume_claim_templates=vct,
        session_labels=dict(args.label) or None,
    )


def cmd_create(args: argparse.Namespace, store: SessionStore, ns: str) -> int:
    if store.get(ns, args.name) is not None:
        raise CliError(f'agentsessions.{GROUP} "{args.name}" already exists')
    body, _ = store.get_or_create(ns, args.name, spec_of(args))
    if args.wait:
        wait_phase(store, ns, args.name, phases.Phase.READY, args.request_timeout)
        body = store.require(ns, args.name)
    if args.output:
        sys.stdout.write(render([body], args.output, single=True, now=dt.datetime.now(dt.UTC)))
    else:
        print(f"agentsession.{GROUP}/{args.name} created")
    return 0


def cmd_exec(args: argparse.Namespace, store: SessionStore, ns: str) -> int:
    cmd = list(args.cmd)
    if not cmd:
        raise CliError("exec needs a command after --, e.g. exec NAME -- ls /")
    import shlex

    with _backend(store, ns, args.name, args) as backend:
        # The runtime answers once the command has finished: output comes at the end, not as it arrives.
        result = backend.execute(shlex.join(cmd) if len(cmd) > 1 else cmd[0], timeout=args.timeout)
    sys.stdout.write(result.output)
    sys.stdout.flush()
    return int(result.exit_code or 0)


def _remote_files(backend: AgentSessionSandbox, root: str) -> list[str] | None:
    """The files under `root` (None when root is a regular file), as the pod lists them: NUL-separated, so a
    name holding a newline stays one name. The pod is hostile by assumption: `safe_local_path` judges each."""
    import shlex

    q = shlex.quote(root)
    result = backend.execute(f"if [ -d {q} ]; then cd {q} && find . -type f -print0; else echo __FILE__; fi")
    if result.exit_code != 0:
        raise CliError(f"cannot read {root}: {result.output.strip()}")
    if result.output.strip() == "__FILE__":
        return None
    return sorted(name.removeprefix("./") for name in result.output.split("\0") if name)


def safe_local_path(dest: Path, name: str) -> Path | None:
    """Where the pod's file `name` goes under `dest`, or None when it must not be written: absolute, with a
    `..` or empty component, with a control character, or resolving (through links already in `dest`)
    outside it. A sandbox that names `a<newline>../.bashrc` must not reach the user's home."""
    parts = name.split("/")
    if (
        not name
        or name.startswith("/")
        or any(part in ("", ".", "..") for part in parts)
        or any(ord(ch) < 32 or ord(ch) == 127 for ch in name)
    ):
        return None
    target = dest.joinpath(*parts)
    root = dest.resolve()
    return target if target.resolve().is_relative_to(root) else None


def cmd_cp(args: argparse.Namespace, store: SessionStore, ns: str) -> int:
    src_name, src = split_remote(args.source)
    dst_name, dst = split_remote(args.destination)
    if (src_name is None) == (dst_name is None):
        raise CliError("cp copies between a local path and NAME:PATH (exactly one side remote)")
    name = src_name or dst_name
    assert name is not None
    with _backend(store, ns, name, args) as backend:
        if dst_name is not None:  # upload
            local = Path(src)
            if not local.exists():
                raise CliError(f"{src}: no such file or directory")
            files = (
                [(dst, local.read_bytes())]
                if local.is_file()
                else [
                    (posixpath.join(dst, p.relative_to(local).as_posix()), p.read_bytes())
                    for p in sorted(local.rglob("*"))
                    if p.is_file()
                ]
            )
            progress(f"uploading {len(files)} file(s) to {name}:{dst}")
            failed = [f"{r.path}: {r.error}" for r in backend.upload_files(files) if r.error]
        else:  # download
            remote = _remote_files(backend, src)
            failed = []
            pairs: list[tuple[str, Path]] = [(src, Path(dst))]
            if remote is not None:
                pairs = []
                for entry in remote:
                    target = safe_local_path(Path(dst), entry)
                    if target is None:
                        failed.append(f"{entry!r}: refused (the sandbox named a path outside {dst})")
                    else:
                        pairs.append((posixpath.join(src, entry), target))
            progress(f"downloading {len(pairs)} file(s) from {name}:{src}")
            for response, (_, target) in zip(backend.download_files([p for p, _ in pairs]), pairs, strict=True):
                if response.error or response.content is None:
                    failed.append(f"{response.path}: {response.error}")
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(response.content)
    if failed:
        raise CliError("cp failed for " + "; ".join(failed))
    return 0


def _set_suspend(args: argparse.Namespace, store: SessionStore, ns: str, value: bool) -> int:
    store.require(ns, args.name)
    store.api.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, args.name, {"spec": {"suspend": value}})
    print(f"agentsession.{GROUP}/{args.name} {'suspended' if value else 'resumed'}")
    if args.wait:
        target = phases.Phase.SUSPENDED if value else phases.Phase.READY
        wait_phase(store, ns, args.name, target, args.request_timeout)
    return 0


def cmd_fork(args: argparse.Namespace, store: SessionStore, ns: str) -> int:
    source = store.require(ns, args.name)
    if args.suspend_source:
        # The client's own fork flow: suspend, create, wait for the fork, resume (even on failure); a source
        # that was suspended already stays suspended.
        was_suspended = SessionView.of(source).phase == phases.Phase.SUSPENDED or bool(
            (source.get("spec") or {}).get("suspend")
        )
        progress(f"agentsession/{args.name}: {'already suspended' if was_suspended else 'suspending for the copy'}")
        fork_session(
            store, ns, args.name, args.new_name, suspend_source=True, ready_timeout=args.request_timeout
        ).close()
        print(f"agentsession.{GROUP}/{args.new_name} created (fork of {args.name}, copied while suspended)")
        progress(f"agentsession/{args.name}: {'stays suspended' if was_suspended else 'resumed'}")
        return 0
    body = {
        "apiVersion": names.API_VERSION,
        "kind": names.SESSION_KIND,
        "metadata": {"name": args.new_name, "namespace": ns},
        "spec": {"forkFrom": {"name": args.name}},
    }
    # Strict: an API server whose CRD has no spec.forkFrom refuses it instead of silently dropping it.
    store.api.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body, field_validation="Strict")
    print(f"agentsession.{GROUP}/{args.new_name} created (fork of {args.name})")
    if args.wait:
        wait_phase(store, ns, args.new_name, phases.Phase.READY, args.request_timeout)
    return 0


def cmd_delete(args: argparse.Namespace, store: SessionStore, ns: str) -> int:
    missing = []
    for name in args.names:
        if store.delete(ns, name):
            print(f'agentsession.{GROUP} "{name}" deleted')
        elif not args.ignore_not_found:
            missing.append(name)
    if missing:
        raise CliError(", ".join(f'agentsessions.{GROUP} "{n}" not found' for n in missing))
    return 0


def cmd_wait(args: argparse.Namespace, store: SessionStore, ns: str) -> int:
    wait_phase(store, ns, args.name, args.phase, args.timeout)
    print(f"agentsession.{GROUP}/{args.name} condition met")
    return 0


COMMANDS: dict[str, Any] = {
    "list": cmd_list,
    "get": cmd_get,
    "create": cmd_create,
    "exec": cmd_exec,
    "cp": cmd_cp,
    "suspend": lambda a, s, n: _set_suspend(a, s, n, True),
    "resume": lambda a, s, n: _set_suspend(a, s, n, False),
    "fork": cmd_fork,
    "delete": cmd_delete,
    "wait": cmd_wait,
}


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        api_client, namespace = connect(args)
        store = SessionStore(api_client)
        return int(COMMANDS[args.command](args, store, namespace))
    except (CliError, SandboxError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ApiException as exc:
        print(f"error: {exc.status} {exc.reason}: {_api_message(exc)}", file=sys.stderr)
        return 1
    except config.ConfigException as exc:
        print(f"error: kubeconfig: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _api_message(exc: ApiException) -> str:
    import json

    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.body)
    except ValueError:
        return str(exc.body)


def run() -> None:
    """The console script's entry point."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
