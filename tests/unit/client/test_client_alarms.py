"""alarms.py: one thread calls each armed function at its time, unless cancelled first."""

from __future__ import annotations

import threading

from langchain_k8s_client.alarms import Alarms


def test_alarms_fire_in_time_order_and_a_cancelled_one_never() -> None:
    alarms = Alarms()
    fired: list[str] = []
    done = threading.Event()

    def note(name: str) -> None:
        fired.append(name)
        if name == "last":
            done.set()

    alarms.after(0.2, lambda: note("last"))
    cancelled = alarms.after(0.05, lambda: note("cancelled"))
    alarms.after(0.01, lambda: note("first"))  # armed after a later one: the thread wakes for it
    cancelled.cancel()
    assert done.wait(10)
    assert fired == ["first", "last"]


def test_a_slow_alarm_does_not_hold_the_next() -> None:
    alarms = Alarms()
    release, second = threading.Event(), threading.Event()
    alarms.after(0.01, lambda: release.wait(10))  # runs on a thread of its own
    alarms.after(0.02, second.set)
    assert second.wait(5)
    release.set()
