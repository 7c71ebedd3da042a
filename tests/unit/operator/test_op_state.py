"""handlers/state.py: kopf's memo carries one typed OperatorState; an event before startup says so."""

from __future__ import annotations

import kopf
import pytest

from agentsession_operator.handlers import state
from agentsession_operator.kube.resync import RESYNC_PERIOD


def test_an_empty_memo_gets_the_defaults_once() -> None:
    memo = kopf.Memo()  # what `kopf run` and KopfRunner start with
    first = state.of(memo)
    assert first is state.of(memo) and first.settings.namespace == () and first.settings.resync_period == RESYNC_PERIOD
    copy = kopf.Memo(memo)  # kopf's per-object shallow copy sees the same state
    assert state.of(copy) is first


def test_no_reconciler_before_startup_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="has not started"):
        state.reconciler_of(kopf.Memo())
