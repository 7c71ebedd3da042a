"""Two operator replicas and one Lease: SIGKILL the leader while sessions are created and reaped.

Measured per kill: the takeover (SIGKILL to the standby holding the Lease) and the first new claim
after the kill. Checked over the whole run: exactly one claim per session (by owner UID, sampled all
along, so a claim created and deleted between two samples of a duplicate would still have to survive
the ~0.3 s between samples), every TTL reaped (Expired, claim gone), each reap late by at most the
failover time plus slack. Both replicas run with the operator's own ServiceAccount and RBAC.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from agentsession_operator.kube.election.lease import Timing
from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

LEASE = ("agentsession-operator", "agentsession-system")
KILLS = 5
TTL_SECONDS = 30
"""Past the worst takeover plus the first claim after it (12.6 s and 13.1 s at load 15): with 12, a session
created just before a kill whose leader had not claimed it yet expired before the standby took over, rightly
with no claim, and the check that every session had one failed (k4-s3, twice in a month)."""
TAKEOVER_TARGET = 15.0


def holder(kube: Kube) -> str | None:
    lease = kube.get("lease", LEASE[0], LEASE[1])
    return ((lease or {}).get("spec") or {}).get("holderIdentity")


def replica_holder(kube: Kube, replicas: dict[str, Replica]) -> str | None:
    """The Lease's holder once it is one of `replicas`: an operator of an earlier test that could not release
    it (its API server stalled: test_api_faults[stall]) still names itself until the Lease expires."""
    held = holder(kube)
    return held if held and any(held.startswith(name + "_") for name in replicas) else None


def log_events(replica: Replica, *keys: str) -> list[dict[str, Any]]:
    """The replica's JSON log lines, each cut to `keys` (kopf's own lines are JSON too)."""
    lines = (json.loads(line) for line in replica.log.read_text().splitlines() if line.startswith("{"))
    return [{key: line.get(key) for key in keys} for line in lines]


def _time(value: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


class Replica(OperatorProcess):
    def __init__(self, base: OperatorProcess, name: str) -> None:
        super().__init__(base.cluster, base.kubeconfig, ["--webhook-port", "0"], log_name=f"operator-{name}.log")
        self.name = name

    def start(self) -> None:
        os.environ["POD_NAME"] = self.name  # the Lease identity is POD_NAME plus a random suffix
        try:
            super().start()
        finally:
            os.environ.pop("POD_NAME", None)


@pytest.fixture
def replicas(operator: OperatorProcess) -> Iterator[dict[str, Replica]]:
    """Replicas a and b instead of the suite's single operator (stopped gracefully: it releases the Lease)."""
    operator.stop()
    pair = {name: Replica(operator, name) for name in ("replica-a", "replica-b")}
    try:
        for replica in pair.values():
            replica.start()
        yield pair
    finally:
        for replica in pair.values():
            replica.stop()
        operator.start()


class ClaimMonitor(threading.Thread):
    """Samples the namespace's claims all along: which claim UIDs each session UID ever had."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        super().__init__(daemon=True)
        self.kube, self.namespace = kube, namespace
        self.by_owner: dict[str, set[str]] = defaultdict(set)
        self.samples = 0
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            for claim in self.kube.list("sandboxclaim", self.namespace):
                for ref in claim["metadata"].get("ownerReferences") or []:
                    if ref.get("kind") == "AgentSession":
                        self.by_owner[ref["uid"]].add(claim["metadata"]["uid"])
            self.samples += 1
            time.sleep(0.2)


def test_graceful_shutdown_hands_over_at_the_next_poll(kube: Kube, replicas: dict[str, Replica]) -> None:
    """SIGTERM (a rollout): the leader releases the Lease and the standby takes it at its next poll.

    Told apart from a Lease left to expire without timing the machine: the leader logs the release, and the
    standby's acquireTime (its wall clock, written in the Lease) comes before an unreleased Lease could have
    been taken, lease_duration after the last renewal (at most retry_period before the SIGTERM). The time
    until kubectl sees the new holder is printed, not asserted: 2.0 s on a quiet machine, 5.4 s once under
    CI's load, where a fixed bound on it failed a release that worked."""
    leader_id = kube.wait_for("a leader", lambda: replica_holder(kube, replicas), timeout=30)
    leader = next(r for name, r in replicas.items() if leader_id.startswith(name + "_"))
    standby = next(r for r in replicas.values() if r is not leader)
    signalled_wall, stopped = dt.datetime.now(dt.UTC), time.monotonic()
    leader.stop()
    kube.wait_for(
        "the standby holding the Lease",
        lambda: (h := holder(kube)) and h.startswith(standby.name + "_"),
        timeout=15,
        interval=0.1,
    )
    print(f"graceful handover seen by kubectl: {time.monotonic() - stopped:.2f} s")
    assert {"event": "leader lease released", "identity": leader_id} in log_events(leader, "event", "identity")
    acquired = _time((kube.get("lease", LEASE[0], LEASE[1]) or {})["spec"]["acquireTime"])
    assert acquired is not None
    taken_after = (acquired - signalled_wall).total_seconds()
    print(f"graceful handover, SIGTERM to the standby's acquireTime: {taken_after:.2f} s")
    timing = Timing()
    assert taken_after < timing.lease_duration - timing.retry_period, "the standby waited for the Lease to expire"
    leader.start()


@pytest.mark.slow  # 5 SIGKILLs and the sessions' TTLs, 85 s: make test-full (make test: test_shards's kill)
def test_leader_sigkilled_standby_takes_over(
    kube: Kube, namespace: str, replicas: dict[str, Replica], record_property: Any
) -> None:
    kube.apply(manifests.template("pause"), manifests.warm_pool("pool", "pause", 0), namespace=namespace)
    kube.wait_for("a leader", lambda: replica_holder(kube, replicas), timeout=30)
    monitor = ClaimMonitor(kube, namespace)
    monitor.start()
    takeovers: list[float] = []
    first_claims: list[float] = []
    created: list[str] = []
    rng = random.Random(12)
    try:
        for kill in range(KILLS):
            leader_id = kube.wait_for("a live leader", lambda: replica_holder(kube, replicas), timeout=30)
            leader = next(r for name, r in replicas.items() if leader_id.startswith(name + "_"))
            standby = next(r for r in replicas.values() if r is not leader)
            # Sessions being created, and earlier ones reaching their TTL, around the kill.
            for i in range(4):
                name = f"k{kill}-s{i}"
                kube.apply(manifests.session(name, "pool", ttl=f"{TTL_SECONDS}s"), namespace=namespace)
                created.append(name)
            time.sleep(rng.uniform(0.0, 1.5))
            leader.kill()
            killed = time.monotonic()
            after = f"k{kill}-after"
            # Longer than any takeover: a session whose TTL passed during the failover rightly gets no claim.
            kube.apply(manifests.session(after, "pool", ttl="30s"), namespace=namespace)
            created.append(after)
            new_id = kube.wait_for(
                "the standby holding the Lease",
                lambda prefix=standby.name + "_": (h := holder(kube)) and h.startswith(prefix) and h,
                timeout=40,
                interval=0.1,
            )
            takeovers.append(time.monotonic() - killed)
            kube.wait_for(
                f"claim of {after}",
                # The claim's name is the session's while that is a DNS-1035 label.
                lambda after=after: any(c["metadata"]["name"] == after for c in kube.list("sandboxclaim", namespace)),
                timeout=60,
                interval=0.1,
            )
            first_claims.append(time.monotonic() - killed)
            assert new_id != leader_id
            leader.start()  # back as the standby
        # Convergence: every session reaped by its TTL, its claim gone, exactly one claim ever per session.
        deadline_slack = max(takeovers) + 10

        def all_expired() -> bool:
            sessions = kube.list("agentsession", namespace)
            return len(sessions) == len(created) and all(
                (s.get("status") or {}).get("phase") == "Expired" for s in sessions
            )

        kube.wait_for("every session Expired", all_expired, timeout=TTL_SECONDS + 90, interval=0.5)
        kube.wait_for("every claim deleted", lambda: not kube.list("sandboxclaim", namespace), timeout=60)
    finally:
        monitor.stop_event.set()
        monitor.join(timeout=10)
    sessions = kube.list("agentsession", namespace)
    lateness = []
    for s in sessions:
        expired = kube.condition(s, "Expired")
        assert expired and expired["reason"] == "TTLExpired", s["metadata"]["name"]
        at, done = _time(s["status"].get("expiresAt")), _time(expired.get("lastTransitionTime"))
        assert at and done
        lateness.append((done - at).total_seconds())
    duplicates = {uid: claims for uid, claims in monitor.by_owner.items() if len(claims) > 1}
    missing = [s["metadata"]["name"] for s in sessions if s["metadata"]["uid"] not in monitor.by_owner]
    report = {
        "kills": len(takeovers),
        "takeover_median_s": round(statistics.median(takeovers), 2),
        "takeover_max_s": round(max(takeovers), 2),
        "first_claim_after_kill_median_s": round(statistics.median(first_claims), 2),
        "first_claim_after_kill_max_s": round(max(first_claims), 2),
        "sessions": len(sessions),
        "duplicate_claims": len(duplicates),
        "reap_lateness_max_s": round(max(lateness), 2),
        "claim_samples": monitor.samples,
    }
    print("failover:", report)
    for key, value in report.items():
        record_property(key, value)
    assert not duplicates, duplicates
    assert not missing, f"sessions that never had a claim: {missing}"
    assert len(sessions) == len(created) == KILLS * 5
    assert max(lateness) <= deadline_slack, lateness
    assert max(takeovers) <= TAKEOVER_TARGET, takeovers
