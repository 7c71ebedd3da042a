"""Issue 50 item 1: what the operator remembers about a session between passes is one record, dropped whole."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from fake_kube import FakeKube, store

from agentsession_operator.kube.reconciler import Reconciler
from agentsession_operator.kube.session_records import Records, SessionRecord

Make = Callable[..., dict[str, Any]]


def test_a_record_is_made_on_need_pruned_at_rest_and_dropped_whole() -> None:
    records, key = Records(), ("ns", "s")
    records.prune(key)  # nothing to prune: no record made
    assert records.get(key) is None and len(records) == 0
    records.of(key).failures = 2
    records.prune(key)
    assert records.get(key) is not None  # something left in it
    records.of(key).failures = 0
    records.prune(key)
    assert records.get(key) is None
    record = records.of(key)
    for field in dataclasses.fields(SessionRecord):  # every field set: one removal forgets all of them
        setattr(record, field.name, object())
    assert records.drop(key) is record and records.get(key) is None


async def test_a_session_at_rest_keeps_only_its_counted_phase_and_forgetting_it_keeps_nothing(
    make_session: Make,
) -> None:
    kube = FakeKube()
    rec = Reconciler(kube)  # type: ignore[arg-type]
    rec.cache.loaded = True
    kube.pools.add(("ns", "python-pool"))
    key = store(kube, make_session())
    try:
        await rec.reconcile(key, "session ADDED")
        record = rec.records.get(key)
        assert record is not None and record.counted_phase  # counted under its phase
        at_rest = dataclasses.replace(record, counted_phase=None, progress_written=None, cached_due=None)
        assert at_rest == SessionRecord(), record  # no lock, no retry, no pacing left behind
        rec.forget(key)
        assert rec.records.get(key) is None and len(rec.records) == 0
    finally:
        await rec.scheduler.stop()


async def test_watch_events_are_driven_without_kopf(make_session: Make) -> None:
    """Issue 50 item 1: the handlers hand each event to kube/watch_events.py, which a test drives with dicts."""
    from agentsession_operator.kube import watch_events

    rec = Reconciler(FakeKube())  # type: ignore[arg-type]
    rec.cache.loaded = True
    key = ("ns", "demo")
    rec.remember_session(key, make_session())
    try:
        pool = {"metadata": {"namespace": "ns", "name": "python-pool", "resourceVersion": "1"}, "spec": {}}
        watch_events.warm_pool(rec, "ADDED", pool)
        record = rec.records.get(key)
        assert record is not None and record.cached_due is not None
        assert record.cached_due[1] == "warm pool appeared or went"  # a pass over the cached body, soon
        watch_events.warm_pool(rec, "MODIFIED", pool)  # nothing moved: no pass asked for again
        assert rec.records.of(key).cached_due == record.cached_due
    finally:
        await rec.scheduler.stop()
