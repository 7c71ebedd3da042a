"""The operator's flags for the local cluster's sandbox network: what the e2e tests' operator and the
benchmarks' run with."""

from __future__ import annotations


def network_args() -> list[str]:
    """The sandbox network as this cluster has it: its pod and Service ranges, and the host (the tests'
    clients run there, as a gateway outside a cluster would) as an allowed client. No sandbox router, as
    shipped (issue 28 item 3): tests/e2e/test_router_modes.py turns it on for its own tests."""
    from devcluster.realnode import network

    return [
        f"--cluster-cidr={network.POD_CIDR}",
        f"--cluster-cidr={network.SERVICE_CIDR}",
        f"--client-cidr={network.HOST_IP}/32",
    ]
