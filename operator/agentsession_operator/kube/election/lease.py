"""Leader election by a coordination.k8s.io Lease, as rules: who may act, and when (no I/O, no clock).

The scheme (client-go's, with the same safety argument):

- A candidate takes a Lease only when it is free (no holder) or when its record has not changed for a
  whole `lease_duration`, measured on the candidate's *own* monotonic clock from the moment it first
  saw that record (never by comparing wall clocks across machines).
- The holder renews every `retry_period` and counts itself leader only until `renew_deadline` after its
  last successful renewal, with `renew_deadline < lease_duration`: when renewals fail, the old leader
  stops acting (fencing) before any standby may take over, so two leaders never act at once.
- Writes use the Lease's resourceVersion (optimistic concurrency): of two candidates racing for a free
  Lease, exactly one wins; the other gets 409 and stays a standby.
- On a graceful shutdown the holder releases the Lease (empty holder), so the standby takes over at its
  next poll instead of after `lease_duration`.

Priorities play no part, so unlike kopf's peering, equal replicas can never freeze each other.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import Enum

from agentsession_api.timestamps import format_micro_time, parse_time


@dataclass(frozen=True)
class Timing:
    lease_duration: float = 10.0  # a standby waits this long after the last change it saw
    renew_deadline: float = 7.0  # the leader stops acting this long after its last renewal
    retry_period: float = 2.0  # how often everyone polls or renews

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("lease timing needs 0 < retry_period < renew_deadline < lease_duration")

    @property
    def round_timeout(self) -> float:
        """How long one lease round (a read and a write) may take: under the renew deadline, as client-go
        bounds its renewals by it. renew_deadline - 2 * retry_period (3 s by default) when that is longer
        than a retry period: a round that stalls one retry period after a renewal is given up in time
        for another round to renew before the hold runs out (rounds start every retry_period, or at once
        when a round overran)."""
        return max(self.retry_period, self.renew_deadline - 2 * self.retry_period)


@dataclass(frozen=True)
class Record:
    """What a Lease's spec says (plus its resourceVersion, which any write must carry)."""

    holder: str | None
    lease_duration: float
    acquire_time: dt.datetime | None = None
    renew_time: dt.datetime | None = None
    transitions: int = 0
    resource_version: str | None = None

    def fingerprint(self) -> tuple[str | None, dt.datetime | None, str | None]:
        """What changes when anyone renews, takes or releases the Lease."""
        return self.holder, self.renew_time, self.resource_version


class Step(Enum):
    CREATE = "create"  # no Lease exists: create it, holding it
    ACQUIRE = "acquire"  # free or expired: take it (transitions + 1)
    RENEW = "renew"  # ours: bump renewTime
    WAIT = "wait"  # someone else holds a live Lease


def next_step(record: Record | None, me: str, unchanged_for: float) -> Step:
    """What a candidate does now, given the Lease (None: absent) and how long (by its own monotonic clock)
    the record has looked exactly as it does now."""
    if record is None:
        return Step.CREATE
    if record.holder == me:
        return Step.RENEW
    if not record.holder:
        return Step.ACQUIRE
    if unchanged_for >= record.lease_duration:
        return Step.ACQUIRE
    return Step.WAIT


def spec_for(step: Step, record: Record | None, me: str, timing: Timing, now: dt.datetime) -> dict[str, object]:
    """The Lease spec a candidate writes for `step` (CREATE, ACQUIRE or RENEW)."""
    stamp = format_micro_time(now)
    if step is Step.RENEW and record is not None:
        acquired = format_micro_time(record.acquire_time) if record.acquire_time else stamp
        transitions = record.transitions
    else:
        acquired = stamp
        transitions = (record.transitions + 1) if record is not None else 0
    return {
        "holderIdentity": me,
        "leaseDurationSeconds": max(1, round(timing.lease_duration)),
        "acquireTime": acquired,
        "renewTime": stamp,
        "leaseTransitions": transitions,
    }


def released_spec(record: Record, now: dt.datetime) -> dict[str, object]:
    """What the holder writes on a graceful shutdown: no holder, so a standby takes it at once."""
    return {
        "holderIdentity": None,
        "leaseDurationSeconds": 1,
        "acquireTime": format_micro_time(record.acquire_time) if record.acquire_time else None,
        "renewTime": format_micro_time(now),
        "leaseTransitions": record.transitions,
    }


def holds(renewed_at: float | None, now: float, timing: Timing) -> bool:
    """Whether the holder may still act (monotonic seconds): only until renew_deadline after a renewal."""
    return renewed_at is not None and now - renewed_at < timing.renew_deadline


def record_from(lease: dict[str, object]) -> Record:
    """A Lease as a plain dict (the API's JSON) to a Record."""
    spec = lease.get("spec") or {}
    meta = lease.get("metadata") or {}
    assert isinstance(spec, dict) and isinstance(meta, dict)
    duration = spec.get("leaseDurationSeconds")
    return Record(
        holder=str(spec["holderIdentity"]) if spec.get("holderIdentity") else None,
        lease_duration=float(duration) if isinstance(duration, int | float) else 0.0,
        acquire_time=parse_time(spec.get("acquireTime")),
        renew_time=parse_time(spec.get("renewTime")),
        transitions=int(str(spec.get("leaseTransitions") or 0)),
        resource_version=str(meta["resourceVersion"]) if meta.get("resourceVersion") else None,
    )
