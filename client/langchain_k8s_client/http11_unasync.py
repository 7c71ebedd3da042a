"""Generate the sync transport (`http11_sync`) from the async one (`http11_async`), as httpcore's unasync does.

``python -m langchain_k8s_client.http11_unasync`` (run by `make crds`) rewrites the async source's names into
their sync twins, word by word, and writes ``http11_sync.py`` beside it; ``--check`` writes nothing and exits 1
with a diff when the committed file is stale (tests/unit/client/test_client_http11.py runs it). The transport's
logic is then written once, and its bounds cannot differ between the two.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

from agentsession_api.tsgen import drift_of, generator_main

SOURCE = Path(__file__).with_name("http11_async.py")
DEFAULT_OUT = Path(__file__).with_name("http11_sync.py")

RENAMES = {
    "AsyncPodHTTPTransport": "PodHTTPTransport",
    "AsyncBaseTransport": "BaseTransport",
    "AsyncByteStream": "SyncByteStream",
    "AsyncIterable": "Iterable",
    "AsyncIterator": "Iterator",
    "AsyncStream": "SyncStream",
    "AsyncBody": "SyncBody",
    "async_connect": "sync_connect",
    "async_lock": "sync_lock",
    "handle_async_request": "handle_request",
    "__aiter__": "__iter__",
    "aclose": "close",
}
"""Whole words of the async source and their sync twins."""

KEYWORDS = ((re.compile(r"\basync (def|for|with) "), r"\1 "), (re.compile(r"\bawait "), ""))


def render(source: str | None = None) -> str:
    text = SOURCE.read_text() if source is None else source
    docstring_end = text.index('"""', 3) + 3
    body = text[docstring_end:]
    for pattern, replacement in KEYWORDS:
        body = pattern.sub(replacement, body)
    body = re.sub(r"\b(" + "|".join(map(re.escape, RENAMES)) + r")\b", lambda m: RENAMES[m.group(1)], body)
    header = (
        '"""The pod\'s HTTP/1.1 transport for httpx, sync: generated from `http11_async` by `http11_unasync`.\n\n'
        "Do not edit: change http11_async.py and run `make crds`. What it does and why: `http11`.\n"
        '"""'
    )
    return header + body


def drift(out: Path = DEFAULT_OUT) -> list[str]:
    """Unified diff between the committed file and a fresh one (empty: no drift)."""
    return drift_of(out, render())


def main(argv: Sequence[str] | None = None) -> int:
    return generator_main(
        argv,
        prog="python -m langchain_k8s_client.http11_unasync",
        description=__doc__,
        default_out=DEFAULT_OUT,
        render=render,
        what="the sync transport",
    )


if __name__ == "__main__":
    sys.exit(main())
