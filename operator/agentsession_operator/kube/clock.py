"""The operator's clock, one function the shell reads (and a test replaces)."""

from __future__ import annotations

import datetime as dt


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
