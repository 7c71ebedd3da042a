"""`python -m devcluster up|down|status|build|nodeagent|...`: the local control plane from the command line."""

from __future__ import annotations

import argparse
import sys

from devcluster import build, prereqs, runtimes
from devcluster.cluster import Cluster, node_kind
from devcluster.errors import DevclusterError, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="devcluster", description=__doc__)
    parser.add_argument(
        "command",
        choices=[
            "up",
            "down",
            "status",
            "build",
            "images",
            "install",
            "uninstall",
            "nodeagent",
            "restart-agent-sandbox",
            "kubectl",
        ],
    )
    parser.add_argument("--push", metavar="ADDR", help="images: push them into the registry at ADDR (127.0.0.1:PORT)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="for kubectl: its arguments")
    args = parser.parse_args(argv)
    if args.command == "kubectl":
        # The kubectl this project built (matching the API server), against $KUBECONFIG or the local cluster.
        import os

        kubeconfig = os.environ.get("KUBECONFIG") or str(Cluster().paths.kubeconfig)
        os.execv(str(build.KUBERNETES.path("kubectl")), ["kubectl", f"--kubeconfig={kubeconfig}", *args.args])
    try:
        # Every host prerequisite first: a missing package stops here, not after a long build.
        if args.command in ("up", "build", "install", "nodeagent"):
            prereqs.ensure(prereqs.for_node(node_kind()))
        elif args.command == "images":
            prereqs.ensure([prereqs.IMAGES])
    except DevclusterError as exc:
        return report(exc)
    if args.command == "images":
        from devcluster import images

        try:
            images.build_all()
            if args.push:
                images.push_all(args.push)
        except DevclusterError as exc:
            return report(exc)
        return 0
    cluster = Cluster()
    try:
        if args.command == "up":
            cluster.up()
        elif args.command == "down":
            cluster.down()
        elif args.command == "build":
            build.build_all(node=node_kind())
            if node_kind() == "real":
                from devcluster import images

                images.build_all()
            runtimes.prepare()
        elif args.command in ("install", "uninstall"):
            from devcluster import install

            action = install.install if args.command == "install" else install.uninstall
            action(cluster)
        elif args.command == "nodeagent":  # issue 33: the gVisor checkpoint agent (Hibernate)
            from devcluster import nodeagent

            nodeagent.install(cluster)
        elif args.command == "restart-agent-sandbox":
            cluster.start_agent_sandbox_controller()
        else:
            running = cluster.is_running()
            where = f"{cluster.node_for(cluster.node).status()}; KUBECONFIG={cluster.paths.kubeconfig}"
            print(f"running ({where})" if running else "not running")
            return 0 if running else 1
    except RuntimeError as exc:  # every DevclusterError, and the runtime's own set-up failures
        print(f"[devcluster] error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
