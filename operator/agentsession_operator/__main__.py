"""`python -m agentsession_operator`: run the operator (one replica; standalone, no peering)."""

from __future__ import annotations

import argparse
import asyncio
import os

import kopf

from agentsession_operator import logs, metrics, preflight
from agentsession_operator.kube import Kube


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agentsession-operator", description=__doc__)
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=None,
        help="watch only this namespace (repeatable; default: all namespaces)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=int(os.environ.get("METRICS_PORT", "8080")),
        help="Prometheus metrics port (0 disables)",
    )
    parser.add_argument(
        "--health-port",
        type=int,
        default=int(os.environ.get("HEALTH_PORT", "8081")),
        help="liveness endpoint port, served at /healthz (0 disables)",
    )
    parser.add_argument(
        "--bind", default=os.environ.get("BIND_ADDRESS", "0.0.0.0"), help="address for the metrics and health endpoints"
    )
    parser.add_argument("--log-format", choices=["json", "console"], default=os.environ.get("LOG_FORMAT", "json"))
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))
    return parser.parse_args(argv)


async def _preflight() -> None:
    kube = await Kube.connect()
    try:
        await preflight.check_agent_sandbox(kube)
    finally:
        await kube.close()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logs.configure(args.log_level, json=args.log_format == "json")
    asyncio.run(_preflight())  # a clear message, not a stack trace, against a too-old agent-sandbox
    if args.metrics_port:
        metrics.serve(args.metrics_port, args.bind)
    from agentsession_operator import main as handlers  # noqa: F401 - registers the kopf handlers

    asyncio.run(
        kopf.operator(
            standalone=True,
            clusterwide=not args.namespace,
            namespaces=args.namespace or [],
            liveness_endpoint=f"http://{args.bind}:{args.health_port}/healthz" if args.health_port else None,
        )
    )


if __name__ == "__main__":
    main()
