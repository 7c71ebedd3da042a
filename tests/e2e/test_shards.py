"""Two operator replicas sharing 2 shards (--shards 2): each caches and reconciles the namespaces of its
shard, every session gets exactly one claim, and when one replica is SIGKILLed the other takes its
shard within 15 s and reaps its sessions. The replicas start one after the other, so the first takes
both shards and lets one go when the second joins (sharding's rebalancing on a join).

Both replicas run with the operator's own ServiceAccount and RBAC (config/rbac names the shard Leases).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from agentsession_operator.kube.election import sharding
from testkit import manifests
from tests.e2e.conftest import Kube, OperatorProcess
from tests.e2e.test_failover import ClaimMonitor, Replica

pytestmark = [pytest.mark.e2e, pytest.mark.faults]

LEASE_NAMESPACE = "agentsession-system"
SHARDS = 2
PER_NAMESPACE = 5
FAILOVER_TARGET = 15.0


def holders(kube: Kube) -> dict[int, str | None]:
    found = {}
    for shard in range(SHARDS):
        lease = kube.get("lease", sharding.shard_lease_name("agentsession-operator", shard), LEASE_NAMESPACE)
        found[shard] = ((lease or {}).get("spec") or {}).get("holderIdentity") or None
    return found


def replica_of(identity: str | None) -> str | None:
    return identity.rsplit("_", 1)[0] if identity else None


def writes_by_term(metrics: str) -> set[tuple[str, str]]:
    """The (Lease, term) pairs under which a replica sent writes (agentsession_held_writes_total)."""
    found = set()
    for line in metrics.splitlines():
        if line.startswith("agentsession_held_writes_total{") and float(line.rsplit(" ", 1)[1]) > 0:
            labels = dict(part.split("=", 1) for part in line.split("{", 1)[1].split("}", 1)[0].split(","))
            found.add((labels["lease"].strip('"'), labels["term"].strip('"')))
    return found


@pytest.fixture
def namespaces(kube: Kube) -> Iterator[dict[int, list[str]]]:
    """Two namespaces in each shard."""
    by_shard: dict[int, list[str]] = {shard: [] for shard in range(SHARDS)}
    while any(len(names) < 2 for names in by_shard.values()):
        name = f"sh-{uuid.uuid4().hex[:8]}"
        names = by_shard[sharding.shard_of(name, SHARDS)]
        if len(names) < 2:
            names.append(name)
    created = [ns for names in by_shard.values() for ns in names]
    for ns in created:
        kube.run("create", "namespace", ns)
    try:
        yield by_shard
    finally:
        for ns in created:
            kube.run("delete", "namespace", ns, "--wait=false", check=False)


@pytest.fixture
def sharded(operator: OperatorProcess, kube: Kube) -> Iterator[dict[str, Replica]]:
    """Replicas a and b with --shards 2 instead of the suite's single operator."""
    operator.stop()
    pair = {name: Replica(operator, name) for name in ("shard-a", "shard-b")}
    for replica in pair.values():
        replica.extra_args += ["--shards", str(SHARDS)]
    try:
        for replica in pair.values():
            replica.start()
        yield pair
    finally:
        for replica in pair.values():
            replica.stop()
        # A killed replica's Leases stay held by it until they expire; a single-Lease operator started beside
        # them waits for that (kube/election/layout_guard.py). Gone with the layout, as docs/operations.md says.
        kube.run("delete", "lease", "-n", LEASE_NAMESPACE, "-l", "agentsession.dev/lease-of", check=False)
        operator.start()


def test_two_replicas_share_the_shards_and_one_takes_over_the_other(
    kube: Kube, namespaces: dict[int, list[str]], sharded: dict[str, Replica], record_property: pytest.RecordProperty
) -> None:
    every = [ns for names in namespaces.values() for ns in names]
    for ns in every:
        kube.apply(manifests.template("pause"), manifests.warm_pool("pool", "pause", 0), namespace=ns)
    split = kube.wait_for(
        "each replica holding one shard",
        lambda: (h := holders(kube)) and {replica_of(v) for v in h.values()} == set(sharded) and h,
        timeout=30,
        interval=0.2,
    )
    monitors = [ClaimMonitor(kube, ns) for ns in every]
    for monitor in monitors:
        monitor.start()
    try:
        for ns in every:
            for i in range(PER_NAMESPACE):
                kube.apply(manifests.session(f"s{i}", "pool", ttl="10m"), namespace=ns)

        def all_ready() -> bool:
            return all(
                len(items := kube.list("agentsession", ns)) == PER_NAMESPACE
                and all((s.get("status") or {}).get("phase") == "Ready" for s in items)
                for ns in every
            )

        kube.wait_for("every session Ready", all_ready, timeout=120, interval=0.5)
        # Each replica cached only its own shard's sessions (its metrics: sessions by namespace and phase).
        for name, replica in sharded.items():
            mine = {ns for shard, ns_list in namespaces.items() if replica_of(split[shard]) == name for ns in ns_list}
            seen = {
                line.split('namespace="')[1].split('"')[0]
                for line in replica.metrics().splitlines()
                if line.startswith("agentsession_sessions{") and not line.rstrip().endswith(" 0.0")
            }
            # Only this test's namespaces: an earlier test's namespace (still being deleted) is some shard's too.
            assert seen & set(every) <= mine, (name, seen, mine)
            assert "agentsession_shards_held 1.0" in replica.metrics()

        # SIGKILL the holder of shard 0, while sessions of that shard reach their TTL.
        victim = replica_of(split[0])
        assert victim is not None
        survivor = next(name for name in sharded if name != victim)
        for ns in namespaces[0]:
            kube.apply(manifests.session("short", "pool", ttl="15s"), namespace=ns)
        kube.wait_for(
            "the short sessions Ready",
            lambda: all(
                ((kube.get("agentsession", "short", ns) or {}).get("status") or {}).get("phase") == "Ready"
                for ns in namespaces[0]
            ),
            timeout=60,
        )
        written = {victim: writes_by_term(sharded[victim].metrics())}  # its last word before the kill
        sharded[victim].kill()
        killed = time.monotonic()
        kube.wait_for(
            "the survivor holding both shards",
            lambda: {replica_of(v) for v in holders(kube).values()} == {survivor},
            timeout=40,
            interval=0.1,
        )
        failover = time.monotonic() - killed
        # Its sessions are reaped by the survivor, and a session created now in that shard is served.
        for ns in namespaces[0]:
            kube.apply(manifests.session("after", "pool", ttl="10m"), namespace=ns)

        def reaped_and_served() -> bool:
            for ns in namespaces[0]:
                short = kube.get("agentsession", "short", ns) or {}
                after = kube.get("agentsession", "after", ns) or {}
                if (short.get("status") or {}).get("phase") != "Expired":
                    return False
                if (after.get("status") or {}).get("phase") != "Ready":
                    return False
            return True

        kube.wait_for("the killed replica's shard reaped and served", reaped_and_served, timeout=90, interval=0.5)
        written[survivor] = writes_by_term(sharded[survivor].metrics())
    finally:
        for monitor in monitors:
            monitor.stop_event.set()
            monitor.join(timeout=10)
    duplicates = {uid: c for m in monitors for uid, c in m.by_owner.items() if len(c) > 1}
    sessions = [s for ns in every for s in kube.list("agentsession", ns)]
    claimed = {uid for m in monitors for uid in m.by_owner}
    missing = [s["metadata"]["name"] for s in sessions if s["metadata"]["uid"] not in claimed]
    print(f"shards: failover {failover:.1f} s, {len(sessions)} sessions")
    record_property("failover_s", round(failover, 2))
    assert not duplicates, duplicates
    assert not missing, missing
    # Issue 54 item 1: no two replicas wrote under one Lease in one term (deterministic claim names would
    # hide a second leader's duplicate writes). Shard 0's Lease has both replicas' writes, in two terms.
    writers: dict[tuple[str, str], set[str]] = {}
    for name, pairs in written.items():
        for pair in pairs:
            writers.setdefault(pair, set()).add(name)
    print("writes by Lease and term:", {f"{lease}#{term}": sorted(w) for (lease, term), w in sorted(writers.items())})
    assert all(len(w) == 1 for w in writers.values()), writers
    shard0 = sharding.shard_lease_name("agentsession-operator", 0)
    assert {name for (lease, _), w in writers.items() if lease == shard0 for name in w} == set(sharded), writers
    assert failover <= FAILOVER_TARGET, failover
