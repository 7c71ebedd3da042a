"""AgentSession-to-Ready through the operator vs a SandboxClaim created directly with the SDK.

Side by side in one run, on the same warm pool (python runtime), interleaved so machine noise hits
both alike: cold (pool of 0) and warm (pool kept full). Prints medians, the ratio and the operator's
absolute added latency. Then a cold start as its user sees it (issue 53 item 5): create -> the first
command answered, `AgentSessionSandbox(...).execute("true")` (the client's own wait and its checks of the
pod: identity token, probe) against the SDK's `create_sandbox(...)` and `commands.run("true")`. A results
file keeps every sample. Run: `.venv/bin/python -m benchmarks.bench_operator [--rounds 9]`.
Uses the running local control plane (or starts one) and starts its own operator process.

Then where a session's added time goes, from watches on the claims and Sandboxes of the namespace (this
process's clock, from the create call): the claim Ready, and its Sandbox's Ready of its current
generation (agent-sandbox acted on the claim: on a warm-pool adoption it has relabelled the Pod with the
claim's UID, which the session's NetworkPolicy selects; the operator declares the session Ready only then).
So the added time splits into the operator's part before the claim's path (the session's create seen, the
claim created), agent-sandbox's relabel after the claim's Ready (a direct claim's user does not wait for
it: its template's shared policy does not select that label), and the operator's Ready write after it.
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import statistics
import time
from typing import Any

import yaml

from benchmarks.bench_scale import EXT, EXT_VERSION, Tracker, claim_ready
from benchmarks.common import create_namespace, start_operator, stop_operator, wait_pool_full
from benchmarks.results import Record
from devcluster import errors
from devcluster.cluster import Cluster, Paths

os.environ["KUBECONFIG"] = str(Paths().kubeconfig)

from k8s_agent_sandbox import SandboxClient  # after KUBECONFIG: the client reads it at import
from k8s_agent_sandbox.models import SandboxInClusterConnectionConfig
from kubernetes import client, config, watch

from langchain_k8s_client import AgentSessionSandbox
from testkit import manifests

NS = "bench-operator"


def kubectl_apply(cluster: Cluster, *docs: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", NS, "-f", "-", input=yaml.safe_dump_all(list(docs)))


def caught_up(sandbox: dict[str, Any]) -> bool:
    """Ready, of the Sandbox's current generation: agent-sandbox has acted on its latest spec."""
    conditions = (sandbox.get("status") or {}).get("conditions") or []
    ready: dict[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
    return claim_ready(sandbox) and ready.get("observedGeneration") == sandbox["metadata"].get("generation")


def owning_claim(sandbox: dict[str, Any]) -> str | None:
    return next(
        (r["name"] for r in sandbox["metadata"].get("ownerReferences") or [] if r["kind"] == "SandboxClaim"), None
    )


class ChildWatch:
    """When each claim of the namespace was first seen Ready, and its Sandbox Ready of its current
    generation (monotonic clock), by claim name: two of bench_scale's Trackers."""

    def __init__(self, api: client.CustomObjectsApi) -> None:
        self.claims = Tracker(api, EXT, EXT_VERSION, NS, "sandboxclaims", claim_ready)
        self.sandboxes = Tracker(api, "agents.x-k8s.io", "v1beta1", NS, "sandboxes", caught_up, key=owning_claim)

    def __enter__(self) -> ChildWatch:
        for tracker in (self.claims, self.sandboxes):
            tracker.start()
            tracker.started.wait(60)
        return self

    def __exit__(self, *_: object) -> None:
        for tracker in (self.claims, self.sandboxes):
            tracker.stop.set()  # daemon threads: they end with their watch, or with the process

    def spans(self, name: str, started: float, ready: float) -> tuple[float, float, float] | None:
        """(create -> claim Ready, claim Ready -> its Sandbox caught up (0 if before), -> Ready seen)."""
        claim, sandbox = self.claims.ready_at.get(name), self.sandboxes.ready_at.get(name)
        if claim is None or sandbox is None:
            return None
        caught = max(claim, sandbox)
        return claim - started, caught - claim, started + ready - caught


def session_to_ready(
    api: client.CustomObjectsApi, name: str, pool: str, starts: dict[str, float], timeout: float = 120
) -> float:
    started = starts[name] = time.monotonic()
    api.create_namespaced_custom_object(
        "agentsession.dev", "v1alpha1", NS, "agentsessions", manifests.session(name, pool)
    )
    w = watch.Watch()
    for event in w.stream(
        api.list_namespaced_custom_object,
        "agentsession.dev",
        "v1alpha1",
        NS,
        "agentsessions",
        field_selector=f"metadata.name={name}",
        timeout_seconds=int(timeout),
    ):
        if ((event["object"].get("status") or {}).get("phase")) == "Ready":
            w.stop()
            return time.monotonic() - started
    raise TimeoutError(name)


def sdk_to_ready(sdk: SandboxClient, name: str, pool: str, starts: dict[str, float]) -> float:
    started = starts[name] = time.monotonic()
    sdk.create_sandbox(pool, namespace=NS, sandbox_ready_timeout=120, claim_name=name)
    return time.monotonic() - started


def session_first_command(name: str, pool: str, starts: dict[str, float]) -> tuple[float, float]:
    """The user's cold start through the operator: create the session, wait, run a first command. The
    seconds in all, and from the client seeing Ready (its own wait's progress) to the answer."""
    ready: list[float] = []

    def seen(step: Any) -> None:
        if step.phase == "Ready" and not ready:
            ready.append(time.monotonic())

    started = starts[name] = time.monotonic()
    sandbox = AgentSessionSandbox(name, NS, warm_pool=pool, ready_timeout=120, on_progress=seen)
    assert sandbox.execute("true").exit_code == 0
    done = time.monotonic()
    sandbox.close()
    return done - started, done - ready[0]


def sdk_first_command(sdk: SandboxClient, name: str, pool: str, starts: dict[str, float]) -> tuple[float, float]:
    started = starts[name] = time.monotonic()
    handle: Any = sdk.create_sandbox(pool, namespace=NS, sandbox_ready_timeout=120, claim_name=name)
    ready = time.monotonic()
    assert handle.commands.run("true").exit_code == 0
    done = time.monotonic()
    return done - started, done - ready


KINDS = ("cold", "warm", "cold-first")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    cluster = Cluster(out=io.StringIO())
    started_cluster = cluster.up()
    config.load_kube_config()
    api = client.CustomObjectsApi()
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "crds/")
    create_namespace(cluster, NS)
    operator = start_operator()
    sdk: Any = SandboxClient(connection_config=SandboxInClusterConnectionConfig())
    try:
        kubectl_apply(
            cluster,
            manifests.template("py", manifests.PYTHON_RUNTIME_IMAGE),
            manifests.warm_pool("cold", "py", 0),
            manifests.warm_pool("warm", "py", 2),
        )
        time.sleep(3)  # the operator's initial listing
        results: dict[str, list[float]] = {f"{who}-{kind}": [] for kind in KINDS for who in ("op", "sdk")}
        starts: dict[str, float] = {}
        names: dict[str, list[str]] = {k: [] for k in results}
        record = Record.start("bench_operator", rounds=args.rounds)
        labels = {"op": "AgentSession", "sdk": "SDK claim"}
        with ChildWatch(api) as children:
            for i in range(args.rounds):
                # Alternate which goes first so neither always meets a busier machine.
                order = ["op", "sdk"] if i % 2 == 0 else ["sdk", "op"]
                for kind in KINDS:
                    for who in order:
                        if kind == "warm":
                            wait_pool_full(api, NS, "warm", 2)
                        name = f"{who}-{kind}-{i}"
                        names[f"{who}-{kind}"].append(name)
                        pool = "warm" if kind == "warm" else "cold"
                        if kind == "cold-first":
                            measure = (
                                session_first_command if who == "op" else functools.partial(sdk_first_command, sdk)
                            )
                            total, after_ready = measure(name, pool, starts)
                            results[f"{who}-{kind}"].append(total)
                            record.sample("Ready -> first command, cold", labels[who], after_ready)
                        elif who == "op":
                            results[f"op-{kind}"].append(session_to_ready(api, name, pool, starts))
                        else:
                            results[f"sdk-{kind}"].append(sdk_to_ready(sdk, name, pool, starts))
            time.sleep(1)  # the last Sandbox's status on the watch
        med = {k: statistics.median(v) for k, v in results.items()}
        print(f"AgentSession (operator) vs SandboxClaim (SDK) to Ready, python runtime, {args.rounds} rounds each")
        print(f"{'start':<6} {'operator':>10} {'SDK':>10} {'ratio':>7} {'added':>9}  target")
        targets = (("cold", "ratio <= 1.1"), ("warm", "added <= 30 ms"), ("cold-first", "ratio <= 1.05"))
        for kind, target in targets:
            op, direct = med[f"op-{kind}"], med[f"sdk-{kind}"]
            print(f"{kind:<6} {op:>9.3f}s {direct:>9.3f}s {op / direct:>7.2f} {1000 * (op - direct):>7.0f}ms  {target}")
        print_spans(children, results, names, starts)
        rows = {
            "cold": "create -> Ready, cold",
            "warm": "create -> Ready, warm",
            "cold-first": "create -> first command, cold",
        }
        for key, values in results.items():
            who, kind = key.split("-", 1)
            for seconds in values:
                record.sample(rows[kind], labels[who], seconds)
        record.finish(
            "s",
            ratios={
                "cold, AgentSession / SDK claim": med["op-cold"] / med["sdk-cold"],
                "cold first command, AgentSession / SDK claim": med["op-cold-first"] / med["sdk-cold-first"],
                "Ready -> first command, AgentSession - SDK claim, s": statistics.median(
                    record.samples["Ready -> first command, cold"]["AgentSession"]
                )
                - statistics.median(record.samples["Ready -> first command, cold"]["SDK claim"]),
                "warm, added s": med["op-warm"] - med["sdk-warm"],
            },
        )
    finally:
        stop_operator(operator)
        cluster.kubectl("delete", "namespace", NS, "--wait=false")
        if started_cluster:
            cluster.down()


def print_spans(
    children: ChildWatch, results: dict[str, list[float]], names: dict[str, list[str]], starts: dict[str, float]
) -> None:
    """The medians of each span, and the added time split between the operator and agent-sandbox: the
    operator's own part is its claim's later Ready (the session's create seen, the claim created) and its
    Ready write after agent-sandbox acted on the claim."""
    print()
    print("where the time goes (medians, ms; from the watches of this process):")
    print(f"{'':<11} {'-> claim Ready':>15} {'-> Sandbox caught up':>21} {'-> Ready seen':>14} {'traced':>7}")
    medians: dict[str, tuple[float, float, float]] = {}
    for key in ("op-cold", "sdk-cold", "op-warm", "sdk-warm"):
        spans = [
            sp
            for name, ready in zip(names[key], results[key], strict=True)
            if (sp := children.spans(name, starts[name], ready)) is not None
        ]
        if not spans:
            continue
        medians[key] = m = tuple(1000 * statistics.median(col) for col in zip(*spans, strict=True))
        print(f"{key:<11} {m[0]:>15.0f} {m[1]:>21.0f} {m[2]:>14.0f} {len(spans):>4}/{len(names[key])}")
    for kind in ("cold", "warm"):
        op, direct = medians.get(f"op-{kind}"), medians.get(f"sdk-{kind}")
        if op is None or direct is None:
            continue
        total, direct_total = (1000 * statistics.median(results[f"{who}-{kind}"]) for who in ("op", "sdk"))
        print(
            f"{kind}: session Ready after {total:.0f} ms, direct claim {direct_total:.0f} ms"
            f" ({total - direct_total:+.0f}). The session's claim Ready after {op[0]:.0f} (direct: {direct[0]:.0f}),"
            f" agent-sandbox acting on it {op[1]:.0f} later (direct: {direct[1]:.0f}, not waited for), the"
            f" operator's Ready write {op[2]:.0f} later (medians, summing to {sum(op):.0f}). The operator's own"
            f" part: {op[0] - direct[0]:+.0f} + {op[2]:.0f} = {op[0] - direct[0] + op[2]:.0f} ms"
        )


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
