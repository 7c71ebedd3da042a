"""Before the operator admits a sandbox router to every session's pod: does it refuse a call without a
credential? (issue 51 item 2, replacing the unchecked ``--sandbox-router-authorizes``.)

The operator sends the router, at ``--sandbox-router-url``, what any pod could: an ``/execute`` naming a Sandbox
that does not exist, with no credential. A router that authorizes answers 401 before it looks for the
Sandbox; anything else (upstream's default ``allow-all`` tries to route it and answers 502 or 404) means it
would forward any caller to any session, and it is not admitted. Sync: it runs once, before kopf starts.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

PROBE_NAME = "agentsession-router-check"
WAIT = 60.0  # seconds for the router to answer at all (it may start beside the operator)


@dataclass(frozen=True)
class Verdict:
    admitted: bool
    reason: str


SILENT = -1
"""The router took the call and did not answer in time: it is trying to route it (one that authorizes answers
401 before it looks for the Sandbox)."""


def judge(status: int | None, error: str = "") -> Verdict:
    """Pure: the router's answer to a call without a credential."""
    if status == 401:
        return Verdict(True, "the router refused a call without a credential (401)")
    if status == SILENT:
        return Verdict(
            False,
            "the router took a call without a credential and tried to route it (no 401 within "
            "5 s): it would forward any caller (run it with --authz-mode=scoped-token)",
        )
    if status is None:
        return Verdict(False, f"the router did not answer: {error}")
    return Verdict(
        False,
        f"the router answered a call without a credential with HTTP {status}, not 401: it would "
        "forward any caller (run it with --authz-mode=scoped-token)",
    )


def _ask(url: str, timeout: float) -> int:
    request = urllib.request.Request(
        url.rstrip("/") + "/execute",
        data=json.dumps({"command": "true"}).encode(),
        headers={
            "Content-Type": "application/json",
            "X-Sandbox-ID": PROBE_NAME,
            "X-Sandbox-Namespace": PROBE_NAME,
            "X-Sandbox-Port": "8888",
        },
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the router itself, never a proxy
    try:
        with opener.open(request, timeout=timeout) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except TimeoutError:  # sent, no answer (a connect timeout comes wrapped in URLError)
        return SILENT


def check(
    url: str,
    wait: float = WAIT,
    ask: Callable[[str, float], int] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Verdict:
    """Ask until the router answers (bounded by ``wait``), then judge its answer."""
    ask = ask or _ask
    deadline = time.monotonic() + wait
    error = ""
    while True:
        try:
            return judge(ask(url, 5.0))
        except OSError as exc:  # not listening yet, refused, timed out
            error = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            return judge(None, error)
        sleep(2.0)
