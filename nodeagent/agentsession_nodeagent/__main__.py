"""``python -m agentsession_nodeagent``: the node agent (the DaemonSet's command)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from agentsession_api.node_agent import server_name
from agentsession_nodeagent import authz, checkpointer, reviewer, server, tls

DRAIN_SECONDS = 20.0
"""How long a stopping agent lets a checkpoint in flight finish: under the pod's 30 s grace period."""


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="agentsession-nodeagent")
    p.add_argument("--listen", default=os.environ.get("POD_IP", "127.0.0.1"), help="the pod's IP (never 0.0.0.0)")
    p.add_argument("--port", type=int, default=8490)
    p.add_argument("--runsc", type=Path, required=True)
    p.add_argument("--runsc-root", type=Path, required=True)
    p.add_argument("--task-state", type=Path, required=True)
    p.add_argument("--checkpoint-root", type=Path, required=True)
    p.add_argument("--allowed-user", required=True, help="system:serviceaccount:<ns>:<operator's ServiceAccount>")
    p.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME", ""),
        help="this node's name (the DaemonSet's spec.nodeName): the agent admits only tokens for its own node",
    )
    p.add_argument("--audience", default=None, help="default: agentsession-nodeagent:<node name>")
    p.add_argument("--max-bytes", type=int, default=None, help="budget of every image on this node together")
    p.add_argument("--min-free-bytes", type=int, default=2 << 30, help="free space the disk keeps (default 2 GiB)")
    args = p.parse_args(argv)
    if problems := preflight(args):
        p.error("; ".join(problems))
    node = checkpointer.Node(
        args.runsc,
        args.runsc_root,
        args.task_state,
        args.checkpoint_root,
        max_bytes=args.max_bytes,
        min_free_bytes=args.min_free_bytes,
    )
    audience = args.audience or authz.audience_for(args.node_name)
    api = reviewer.Reviewer()
    agent = server.Agent(node, api.review, args.allowed_user, audience)
    # TLS only: the operator sends its token to no one who cannot show this node's certificate.
    try:
        identity = tls.obtain(api, args.node_name)
    except (tls.NotSigned, OSError) as err:  # urllib's errors are OSErrors
        raise SystemExit(f"agentsession-nodeagent: no serving certificate for node {args.node_name}: {err}") from err
    httpd = server.serve(agent, args.listen, args.port, context=tls.server_context(identity))
    renewal = tls.Renewal(api, args.node_name, identity, lambda context: setattr(httpd, "context", context))
    renewal.start()
    swept = f", {agent.partials_swept} partial images swept" if agent.partials_swept else ""
    print(
        f"node agent on https://{args.listen}:{args.port} as {server_name(args.node_name)} (until "
        f"{identity.not_after:%Y-%m-%d %H:%M}Z), for {args.allowed_user} ({audience}){swept}",
        flush=True,
    )
    if not httpd.serve_until_terminated(DRAIN_SECONDS):
        print(f"node agent stopped with requests still running after {DRAIN_SECONDS} s", flush=True)


def preflight(args: argparse.Namespace) -> list[str]:
    """What keeps the agent from doing its job, said at start (issue 49 item 5): a non-root agent, or a host path
    not mounted, found no pod and answered every checkpoint 404 ("not on this node") instead of failing."""
    problems = []
    if os.geteuid() != 0:
        problems.append(
            f"the node agent runs as uid {os.geteuid()}: it must run as root (with every capability dropped), "
            "since containerd's task bundles and runsc's state are root's own (docs/gvisor.md)"
        )
    # Not --runsc-root: runsc makes it when the node's first gVisor pod starts, which may come after the agent.
    if not args.task_state.is_dir():
        problems.append(
            f"--task-state {args.task_state} is not a directory here: mount the node's containerd task bundles "
            "into the agent's pod"
        )
    if not args.node_name:
        problems.append("--node-name (or $NODE_NAME) is empty: the agent's certificate and tokens name its node")
    if not os.access(args.runsc, os.X_OK):
        problems.append(f"--runsc {args.runsc} is not an executable here: mount the node's runsc into the agent's pod")
    return problems


if __name__ == "__main__":
    main()
