"""What the claim-conformity pin costs the operator's claim creations (issue 51 item 3).

`agentsession-operator-claim-conforms` (opt-in: config/components/claim-conformity) takes every
AgentSession of a claim's namespace as a parameter: the API server judges each claim the operator
creates once per session of the namespace. This times server-side dry-run creations of a conforming
claim, sent as an account named like the operator's (the pins match it by name), with the policy's
binding in place and without it, rounds interleaved, at growing numbers of sessions in the namespace.
The sessions name a pool that does not exist and no operator runs: nothing else moves.
Run: `.venv/bin/python -m benchmarks.bench_claim_pin --points 100,1000,4000 --rounds 5 --creates 40`.
"""

from __future__ import annotations

import argparse
import io
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import create_namespace, wait_machine_idle
from benchmarks.results import Record
from devcluster.cluster import Cluster
from testkit import manifests

NS = "bench-claim-pin"
ACCOUNT = "agentsession-operator"  # the pins match the operator by its ServiceAccount's name
BINDING = "agentsession-operator-claim-conforms"
CONFIG = Path(__file__).resolve().parents[1] / "config"
PINS = CONFIG / "admission" / "operator_write_pins.yaml"
CONFORMITY = CONFIG / "components" / "claim-conformity" / "claim_conformity.yaml"
SIDES = ("without the pin", "with the pin")


def _account(cluster: Cluster) -> str:
    """A token of a ServiceAccount named like the operator's, allowed to create claims in NS."""
    rbac = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT, "namespace": NS}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "bench-claim-pin", "namespace": NS},
            "rules": [
                {"apiGroups": ["extensions.agents.x-k8s.io"], "resources": ["sandboxclaims"], "verbs": ["create"]}
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "bench-claim-pin", "namespace": NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "bench-claim-pin"},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NS}],
        },
    ]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    return cluster.kubectl("create", "token", ACCOUNT, "-n", NS, "--duration=2h").stdout.strip()


def _claim(owner: dict[str, Any], **spec: Any) -> dict[str, Any]:
    uid = owner["metadata"]["uid"]
    return {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {
            "name": owner["metadata"]["name"],
            "labels": {"agentsession.dev/session-uid": uid},
            "ownerReferences": [
                {
                    "apiVersion": "agentsession.dev/v1alpha1",
                    "kind": "AgentSession",
                    "name": owner["metadata"]["name"],
                    "uid": uid,
                    "controller": True,
                }
            ],
        },
        "spec": {"warmPoolRef": {"name": "nopool"}, "lifecycle": {"shutdownPolicy": "Retain"}, **spec},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default="100,1000,4000", help="sessions in the namespace, ascending")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--creates", type=int, default=40, help="dry-run creations per side and round")
    args = parser.parse_args()
    points = [int(p) for p in args.points.split(",")]
    cluster = Cluster(out=io.StringIO())
    started = cluster.up()
    from kubernetes import client, config

    config.load_kube_config(str(cluster.paths.kubeconfig))
    admin = client.ApiClient(client.Configuration.get_default_copy())
    sessions = client.CustomObjectsApi(admin)
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "crds/")
        create_namespace(cluster, NS)
        cluster.kubectl("apply", "-f", str(PINS), "-f", str(CONFORMITY))
        binding = next(
            d
            for d in yaml.safe_load_all(CONFORMITY.read_text())
            if d["kind"] == "ValidatingAdmissionPolicyBinding" and d["metadata"]["name"] == BINDING
        )
        as_operator = client.Configuration.get_default_copy()
        as_operator.cert_file = as_operator.key_file = None
        as_operator.api_key = {"authorization": f"Bearer {_account(cluster)}"}
        claims = client.CustomObjectsApi(client.ApiClient(as_operator))
        owner = sessions.create_namespaced_custom_object(
            "agentsession.dev", "v1alpha1", NS, "agentsessions", manifests.session("s-0", "nopool")
        )
        good, bad = _claim(owner), _claim(owner, env=[{"name": "LD_PRELOAD", "value": "/tmp/x.so"}])

        def create(body: dict[str, Any]) -> bool:
            try:
                claims.create_namespaced_custom_object(
                    "extensions.agents.x-k8s.io", "v1beta1", NS, "sandboxclaims", body, dry_run="All"
                )
                return True
            except client.ApiException as exc:
                if exc.status != 403:
                    raise
                return False

        def pinned(on: bool) -> None:
            """Put the binding in place (or take it away) and wait until the API server acts on it."""
            if on:
                cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(binding))
            else:
                cluster.kubectl("delete", "validatingadmissionpolicybinding", BINDING, "--ignore-not-found")
            deadline = time.monotonic() + 60
            while create(bad) == on:  # refused when on, admitted when off
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the binding {'in place' if on else 'gone'} had no effect in 60 s")
                time.sleep(0.2)

        def timed() -> float:
            began = time.perf_counter()
            for _ in range(args.creates):
                if not create(good):
                    raise RuntimeError("the conforming claim was refused")
            return (time.perf_counter() - began) / args.creates * 1000

        record = Record.start("bench_claim_pin", args.rounds, points=points, creates=args.creates)
        have = 1
        for point in points:
            with ThreadPoolExecutor(8) as pool:
                list(
                    pool.map(
                        lambda i: sessions.create_namespaced_custom_object(
                            "agentsession.dev", "v1alpha1", NS, "agentsessions", manifests.session(f"s-{i}", "nopool")
                        ),
                        range(have, point),
                    )
                )
            have = max(have, point)
            wait_machine_idle()
            for r in range(args.rounds):
                for side in SIDES if r % 2 == 0 else tuple(reversed(SIDES)):
                    pinned(side == "with the pin")
                    record.sample(f"{point} sessions", side, timed())
            print(f"{point} sessions: done", flush=True)
        _report(record, points)
    finally:
        cluster.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        if started:
            cluster.down()


def _report(record: Record, points: list[int]) -> None:
    medians = record.medians()
    ratios: dict[str, float] = {}
    print(f"{record.rounds} rounds interleaved; ms per dry-run claim creation as the operator (median)")
    print(f"{'sessions in the namespace':<28}{SIDES[0]:>18}{SIDES[1]:>16}{'ratio':>8}")
    for point in points:
        row = medians[f"{point} sessions"]
        ratio = row[SIDES[1]] / row[SIDES[0]]
        ratios[f"{point} sessions: with / without"] = ratio
        print(f"{point:<28}{row[SIDES[0]]:>18.2f}{row[SIDES[1]]:>16.2f}{ratio:>7.2f}x")
    record.finish(unit="ms", medians=medians, ratios=ratios)


if __name__ == "__main__":
    main()
