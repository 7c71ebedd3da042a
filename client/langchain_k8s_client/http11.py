"""A small keep-alive HTTP/1.1 transport for httpx, for the pod's runtime (plain `http://` only).

Measured against the pod (raw POSTs of `sh -c true`, 400 interleaved rounds): httpx's default
transport (httpcore + h11) costs 0.22 to 0.26 ms more per request than this one, 15 % of the whole
call; of that, sending headers and body in two `send`s was ~0.05 ms. Here a request goes out in one
`sendall` (headers and a body up to 64 KiB), the response head is parsed in one pass, and the body is
handed to httpx as it arrives. httpx's request and response types stay, with its timeouts and its
exception types (the retry rules in `transport` tell a request that never left,
`ConnectError`/`ConnectTimeout`, from one that may have run), and its mock transport for the unit
tests. No content coding is decoded on the way: the client asks for identity and `limits` refuses
any other before reading the body.

Bounds a hostile pod cannot lift: the size and framing bounds of `http11_protocol` (a response head
of at most `MAX_HEAD_BYTES`, chunk lines and trailers bounded, `chunked` the only transfer coding), and
here the time: a response head must arrive within the request's read timeout in total (httpcore waited
the read timeout per received chunk). With the `DEADLINE` extension (`limits.read_bounded` sets it) no
read waits past that instant, so a pod that keeps the connection busy without yielding a body byte
(endless trailers) is cut there too. The body's size is bounded by the caller (`limits.read_bounded`).

The parsing is sans-IO, in `http11_protocol` (`ResponseParser`, `serialize_head`); the transport that
moves bytes and bounds the time is written once, async (`http11_async`), and its sync twin generated
from it (`http11_sync`, by `http11_unasync`, as httpcore does), over the two flavours of a connection in
`http11_io`, so neither its parsing nor its time bounds can differ between them (the async one now honours
the `DEADLINE` extension too). `https://` (a router behind TLS) takes the same path over an `ssl` socket, with
httpx's default context (`httpx.create_ssl_context()`: certifi's CAs, or `SSL_CERT_FILE`/`SSL_CERT_DIR`;
ALPN http/1.1), so the same bounds hold there (httpx's own transport knew only a per-read timeout).
"""

from __future__ import annotations

# The size bounds and ResponseHead live in http11_protocol, the drivers' settings in http11_io: importable here.
from .http11_async import AsyncPodHTTPTransport
from .http11_io import COALESCE_BYTES, DEADLINE, KEEPALIVE_EXPIRY, MAX_IDLE
from .http11_protocol import MAX_HEAD_BYTES, MAX_LINE_BYTES, MAX_TRAILER_BYTES, ResponseHead, ResponseParser
from .http11_sync import PodHTTPTransport

__all__ = [
    "COALESCE_BYTES",
    "DEADLINE",
    "KEEPALIVE_EXPIRY",
    "MAX_HEAD_BYTES",
    "MAX_IDLE",
    "MAX_LINE_BYTES",
    "MAX_TRAILER_BYTES",
    "AsyncPodHTTPTransport",
    "PodHTTPTransport",
    "ResponseHead",
    "ResponseParser",
]
