"""API errors injected into the operator's own requests by a fault-injecting proxy (tests/e2e/faultproxy.py).

The suite's operator is stopped; one started with its ServiceAccount's kubeconfig pointed at the proxy
runs instead (its API client and kopf's both go through it). kubectl in the test talks to the API
server directly. Checks after each fault: every live session Ready, exactly one claim per live session,
no orphan claims, updates applied, and for 429: no request of ours sooner than Retry-After.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import yaml

from devcluster.cluster import Cluster
from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess
from tests.e2e.faultproxy import FaultProxy, Faults, Record
from tests.e2e.test_faults import apply_retrying, converged, setup_pool

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

# The first part of a 429's Retry-After window in which a connection the proxy accepted counts as on its way
# before the operator read the 429. Both clocks are loops on the same 2 loaded cores: the proxy stamps `accepted`
# in the test process's loop, and the operator sends what its tasks decided before it read the answer. Fixed
# windows were too short twice: 0.25 s (the clean-clone CI of 9a07647: 5 requests at 0.34 to 0.42 s) and 0.5 s
# (that of fe7341a: 8 requests at 0.52 to 0.57 s, one burst, as one stalled loop releases what it held; claim
# and status patches, none of them the throttled request). The exact rule, no request goes out once the gate
# is closed, is tests/unit/operator/test_op_transport.py's; here an operator that ignored Retry-After would
# still send in the window's second half (this test makes about 10 requests a second), and the throttled
# request's own retry must wait the whole Retry-After (min_retry_gap).
IN_FLIGHT_SHARE = 0.5


@pytest.fixture(scope="module")
def proxied(
    cluster: Cluster, operator: OperatorProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[FaultProxy, OperatorProcess]]:
    """The proxy, and an operator whose every API request goes through it (instead of the suite's)."""
    workdir = tmp_path_factory.mktemp("faultproxy")
    proxy = FaultProxy(cluster.server, cluster.paths.pki / "ca.crt", workdir).start()
    kubeconfig = proxy.kubeconfig(operator.kubeconfig, workdir / "operator.kubeconfig")
    operator.stop()
    # A short resync period: the 410 test also covers a relist that found nothing (no event at all).
    proxied_operator = OperatorProcess(
        cluster, kubeconfig=kubeconfig, extra_args=["--resync-period", "20"], log_name="operator-proxied.log"
    )
    try:
        proxied_operator.start()
        yield proxy, proxied_operator
    finally:
        proxied_operator.stop()
        proxy.stop()
        operator.start()


@pytest.fixture
def faulty(proxied: tuple[FaultProxy, OperatorProcess]) -> Iterator[tuple[FaultProxy, OperatorProcess]]:
    """The proxied operator, running (a test that killed it must not fail the next ones), faults off."""
    proxy, op = proxied
    proxy.set_faults(Faults())
    if op.proc is None or op.proc.poll() is not None:
        op.start()
    yield proxy, op
    proxy.set_faults(Faults())


def _ours(record: Record) -> bool:
    """The operator's own API client (kube/api.py), not kopf's watches and lists."""
    return not record.user_agent.startswith("kopf")


def retry_after_report(records: list[Record]) -> dict[str, object]:
    """For every injected 429: did anything of the same client of ours go out before Retry-After had
    passed? The Lease has a client of its own (its own gate, user agent "... leader-election"): a 429 on a
    reconcile request must not hold the renewals back, and one on a renewal holds back only renewals."""
    throttled = [r for r in records if r.status == 429 and r.answered is not None and r.retry_after]
    early = in_flight = 0
    samples: list[str] = []
    gaps: list[float] = []  # the same request (method and target) sent again, seconds after the 429
    for r in throttled:
        assert r.answered is not None and r.retry_after is not None
        until = r.answered + r.retry_after
        for other in records:
            if other is r or not (r.answered < other.arrived < until):
                continue
            if _ours(r) and _ours(other) and r.user_agent == other.user_agent:
                if other.accepted < r.answered + r.retry_after * IN_FLIGHT_SHARE:
                    in_flight += 1
                else:
                    early += 1
                    samples.append(
                        f"{other.method} {other.target[:80]} +{other.arrived - r.answered:.2f}s {other.user_agent}"
                    )
        # The same request sent again (not a duplicate that was already on its way).
        again = next(
            (
                o
                for o in records
                if o.accepted > r.answered + r.retry_after * IN_FLIGHT_SHARE
                and (o.method, o.target) == (r.method, r.target)
            ),
            None,
        )
        if again is not None:
            gaps.append(again.arrived - r.answered)
    return {
        "throttled": len(throttled),
        "early": early,
        "in_flight": in_flight,
        "retries": len(gaps),
        "min_retry_gap": min(gaps) if gaps else float("nan"),
        "early_samples": samples[:10],
    }


FAULTS = {
    "conflict": Faults(conflict=0.3),
    "throttle": Faults(throttle=0.15, retry_after=2),
    "server_error": Faults(server_error=0.2),
    "reset_before": Faults(reset_before=0.2),
    "reset_after": Faults(reset_after=0.2),
    "slow": Faults(slow=0.3, slow_seconds=(1.0, 4.0)),
    "stall": Faults(stall=0.1),  # the operator's requests time out after 30 s (kopf's after 60 s)
}


# A stall costs the operator's 30 s timeouts, 68 s in all: make test-full.
@pytest.mark.parametrize("fault", [pytest.param(f, marks=[pytest.mark.slow] if f == "stall" else []) for f in FAULTS])
def test_api_faults_sessions_converge(
    kube: Kube, namespace: str, faulty: tuple[FaultProxy, OperatorProcess], fault: str
) -> None:
    """8 sessions created, 3 updated (ttl), 3 deleted, with one kind of fault on the operator's requests."""
    proxy, op = faulty
    setup_pool(kube, namespace)
    names = [f"f-{i}" for i in range(8)]
    started = time.monotonic()
    first = len(proxy.snapshot())
    proxy.set_faults(FAULTS[fault])
    try:
        apply_retrying(kube, namespace, [manifests.session(n, "pool", ttl="2h") for n in names])
        # The update below lands on sessions the operator has already judged (each has a phase).
        kube.wait_for(
            "a status on every session",
            lambda: (
                len([s for s in kube.list("agentsession", namespace) if (s.get("status") or {}).get("phase")])
                == len(names)
            ),
            timeout=120,
            interval=0.5,
        )
        apply_retrying(kube, namespace, [manifests.session(n, "pool", ttl="3h") for n in names[:3]])
        kube.run("delete", "agentsession", "-n", namespace, "--wait=false", *names[-3:])
        live = set(names[:-3])
        converged(kube, namespace, live, timeout=180)

        def updated() -> bool:
            return all(
                (s["status"].get("resolved") or {}).get("ttl") in ("3h", "3h0m0s", "10800s")
                for s in kube.list("agentsession", namespace)
                if s["metadata"]["name"] in names[:3]
            )

        kube.wait_for("the ttl updates applied", updated, timeout=120, interval=1.0)
    finally:
        proxy.set_faults(Faults())
    records = proxy.snapshot()[first:]
    injected = sum(1 for r in records if r.fault == fault)
    took = time.monotonic() - started
    print(f"{fault}: {len(records)} requests, {injected} faults injected, converged in {took:.1f} s")
    assert injected > 0, "no fault was injected: the test proved nothing"
    assert op.proc is not None and op.proc.poll() is None, "the operator exited"
    if fault == "throttle":
        report = retry_after_report(records)
        print("Retry-After:", report)
        assert report["early"] == 0, report
        assert report["retries"] and float(report["min_retry_gap"]) >= 2.0 - 0.05, report  # type: ignore[arg-type]


def test_watch_relist_410_drops_deleted_policy_and_pool(
    kube: Kube, namespace: str, faulty: tuple[FaultProxy, OperatorProcess]
) -> None:
    """A policy and a warm pool deleted while their watches are down; the watches then get 410 Gone.

    kopf relists and delivers what is there, but no DELETED event: the deleted policy must no longer
    be in force (admission and reconciling) and the deleted pool no longer count as existing."""
    proxy, op = faulty
    kube.apply(
        manifests.template("pause"),
        manifests.warm_pool("pool", "pause", 0),
        manifests.warm_pool("doomed-pool", "pause", 0),
        _policy("keeper", {"limits": {"maxTtl": "24h"}}),
        _policy("doomed", {"limits": {"maxTtl": "10m"}}),
        namespace=namespace,
    )
    long_ttl = manifests.session("long", "pool", ttl="1h")
    kube.wait_for("the doomed policy in force", lambda: _refusal(kube, long_ttl, namespace), timeout=30)
    # Taken before the cuts: kopf reconnects within milliseconds of its watch's reset, possibly before
    # cut_watches() has even returned here (the clean-clone CI of 3b2c0bd timed out waiting for a
    # reconnection that had come before a timestamp taken after the cuts).
    cut = time.monotonic()
    for fragment in ("agentsessionpolicies", "sandboxwarmpools"):
        proxy.hold_watches(fragment)
        assert proxy.cut_watches(fragment) >= 1, f"no open watch of {fragment}"
    kube.run("delete", "agentsessionpolicy", "doomed", "-n", namespace)
    kube.run("delete", "sandboxwarmpool", "doomed-pool", "-n", namespace)

    # Both watches try to resume from their resourceVersion (held): they would replay the DELETEDs.
    def not_reconnected() -> list[str]:
        return [
            f
            for f in ("agentsessionpolicies", "sandboxwarmpools")
            if not any(
                f in r.target and "watch=true" in r.target and "resourceVersion" in r.target and r.arrived > cut
                for r in proxy.snapshot()
            )
        ]

    try:
        kube.wait_for("the watches reconnecting", lambda: not not_reconnected(), timeout=30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; no watch with a resourceVersion since the cut: {not_reconnected()}") from exc
    for fragment in ("agentsessionpolicies", "sandboxwarmpools"):
        proxy.release_watches(fragment, gone=True)
    kube.wait_for(
        "410 Gone sent on both watches",
        lambda: sum(1 for r in proxy.snapshot() if r.fault == "gone") >= 2,
        timeout=30,
    )
    gone_at = time.monotonic()
    kube.wait_for("the deleted policy out of force", lambda: not _refusal(kube, long_ttl, namespace), timeout=30)
    lifted = time.monotonic() - gone_at
    kube.apply(long_ttl, manifests.session("orphaned-pool", "doomed-pool"), namespace=namespace)
    cond = kube.wait_for(
        "WarmPoolNotFound for the deleted pool",
        lambda: (
            (c := kube.condition(kube.get("agentsession", "orphaned-pool", namespace), "Ready"))
            and c.get("reason") == "WarmPoolNotFound"
            and c
        ),
        timeout=30,
    )
    print(f"after 410 Gone: policy out of force in {lifted:.1f} s; pool: {cond['reason']}: {cond.get('message')}")
    kube.wait_for(
        "the long-ttl session Ready with ttl 1h",
        lambda: (
            (s := kube.get("agentsession", "long", namespace))
            and (s.get("status") or {}).get("phase") == "Ready"
            and (s["status"].get("resolved") or {}).get("ttl") in ("1h", "1h0m0s", "3600s")
        ),
        timeout=60,
    )
    assert op.proc is not None and op.proc.poll() is None


def _policy(name: str, spec: dict[str, object]) -> dict[str, object]:
    return {
        "apiVersion": "agentsession.dev/v1alpha1",
        "kind": "AgentSessionPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def _refusal(kube: Kube, body: dict[str, object], namespace: str) -> str | None:
    """The admission webhook's refusal of `body` (a server-side dry run), or None when admitted."""
    proc = kube.run("create", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(body), check=False)
    if proc.returncode == 0:
        return None
    return proc.stderr.strip() or "refused"
