"""HTTP/1.1 for the pod's transport (`http11`), sans-IO: the request head as it is sent
(`serialize_head`) and the response parser (`ResponseParser`), fed whatever bytes the sync or async
driver received. Both drivers parse through this one parser, so its bounds hold for both alike.

Bounds a hostile pod cannot lift: a response head is at most `MAX_HEAD_BYTES` (the drivers bound the time
it takes); a chunk size line is at most `MAX_LINE_BYTES`, the trailer section `MAX_TRAILER_BYTES`; the
only transfer coding is `chunked`; a 1xx answer other than 101 is skipped; malformed framing raises
`httpx.RemoteProtocolError`. No content coding is decoded (`limits` refuses any but identity).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import httpx

MAX_HEAD_BYTES: Final = 64 * 1024
"""Largest response head (status line and headers) accepted."""

MAX_LINE_BYTES: Final = 4096
"""Largest chunk-size line or trailer line accepted in a chunked body."""

MAX_TRAILER_BYTES: Final = 4096
"""Largest trailer section (every trailer line together) accepted: the runtime sends none, and a
trailer yields no body byte, so endless ones would otherwise be read forever."""

_NO_BODY_STATUS: Final = frozenset({204, 304})


@dataclass(frozen=True)
class ResponseHead:
    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    keep_alive: bool


class ResponseParser:
    """One response, fed the bytes received: `head()` then `body()` until it returns None (done).

    Both return b"" / None-for-head when they need more bytes (`feed`; `feed(b"")` is the end of the
    stream). Raises `httpx.RemoteProtocolError` on anything malformed or cut short."""

    def __init__(self, method: str, buffered: bytes = b"") -> None:
        self._method = method
        self._buf = bytearray(buffered)
        self._eof = False
        self._mode = ""  # "length", "chunked", "close" or "none", once the head is parsed
        self._left = 0  # length mode: bytes left; chunked: bytes left in the current chunk
        self._chunk_state = "size"  # size, data, crlf, trailers
        self._trailer_bytes = 0
        self.keep_alive = False
        self._complete = False  # body() returned None

    def feed(self, data: bytes) -> None:
        if data:
            self._buf += data
        else:
            self._eof = True

    @property
    def needs_data(self) -> bool:
        return not self._eof

    def head(self) -> ResponseHead | None:
        while True:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > MAX_HEAD_BYTES:
                    raise httpx.RemoteProtocolError(f"response head larger than {MAX_HEAD_BYTES} bytes")
                if self._eof:
                    raise httpx.RemoteProtocolError("server disconnected without sending a complete response head")
                return None
            if end + 4 > MAX_HEAD_BYTES:
                raise httpx.RemoteProtocolError(f"response head larger than {MAX_HEAD_BYTES} bytes")
            raw = bytes(self._buf[:end])
            del self._buf[: end + 4]
            head = self._parse_head(raw)
            if 100 <= head.status < 200:
                if head.status == 101:
                    raise httpx.RemoteProtocolError("unexpected 101 Switching Protocols")
                continue  # 100 Continue, 103 Early Hints: the real answer follows
            return head

    def _parse_head(self, raw: bytes) -> ResponseHead:
        lines = raw.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        version = parts[0]
        if len(parts) < 2 or version not in (b"HTTP/1.1", b"HTTP/1.0") or len(parts[1]) != 3 or not parts[1].isdigit():
            raise httpx.RemoteProtocolError(f"malformed status line {lines[0][:100]!r}")
        status = int(parts[1])
        reason = parts[2] if len(parts) > 2 else b""
        headers: list[tuple[bytes, bytes]] = []
        lengths: set[bytes] = set()
        codings: list[bytes] = []  # every Transfer-Encoding token, in order
        close = version == b"HTTP/1.0"
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip() or b"\0" in line or b"\n" in line:
                raise httpx.RemoteProtocolError(f"malformed header line {line[:100]!r}")
            value = value.strip(b" \t")
            headers.append((name, value))
            lower = name.lower()
            if lower == b"content-length":
                lengths.add(value)
            elif lower == b"transfer-encoding":
                codings += [token.strip().lower() for token in value.split(b",")]
            elif lower == b"connection":
                tokens = {t.strip().lower() for t in value.split(b",")}
                close = (close and b"keep-alive" not in tokens) or b"close" in tokens
        if self._method == "HEAD" or status in _NO_BODY_STATUS or status < 200:
            self._mode = "none"
        elif codings:
            # Only `chunked`: any other transfer coding would be decoded by no one (h11 refuses it too).
            if codings != [b"chunked"]:
                raise httpx.RemoteProtocolError(f"unsupported Transfer-Encoding {b', '.join(codings)[:100]!r}")
            self._mode = "chunked"
        elif lengths:
            if len(lengths) != 1:
                raise httpx.RemoteProtocolError("conflicting Content-Length headers")
            (length,) = lengths
            if not (length.isdigit() and len(length) <= 18):
                raise httpx.RemoteProtocolError(f"malformed Content-Length {length[:40]!r}")
            self._mode, self._left = "length", int(length)
        else:
            self._mode = "close"
        self.keep_alive = not close and self._mode != "close"
        return ResponseHead(status, reason, headers, self.keep_alive)

    def body(self) -> bytes | None:
        """Body bytes received so far (b"": feed more), or None when the body is complete."""
        data = self._body()
        if data is None:
            self._complete = True
        return data

    @property
    def reusable(self) -> bool:
        """The whole response was read, the server keeps the connection open, and nothing follows it."""
        return self._complete and self.keep_alive and not self._buf

    def _body(self) -> bytes | None:
        if self._mode == "none":
            return None
        if self._mode == "length":
            return self._take_length()
        if self._mode == "close":
            if self._buf:
                data = bytes(self._buf)
                self._buf.clear()
                return data
            return None if self._eof else b""
        return self._take_chunked()

    def _take_length(self) -> bytes | None:
        if self._left == 0:
            return None
        if not self._buf:
            if self._eof:
                raise httpx.RemoteProtocolError(f"server disconnected with {self._left} body bytes missing")
            return b""
        data = bytes(self._buf[: self._left])
        del self._buf[: len(data)]
        self._left -= len(data)
        return data

    def _take_chunked(self) -> bytes | None:
        while True:
            if self._chunk_state == "data":
                if self._left == 0:
                    self._chunk_state = "crlf"
                    continue
                if not self._buf:
                    return self._more()
                data = bytes(self._buf[: self._left])
                del self._buf[: len(data)]
                self._left -= len(data)
                return data
            line = self._line()
            if line is None:
                return self._more()
            if self._chunk_state == "crlf":
                if line:
                    raise httpx.RemoteProtocolError("chunk not followed by CRLF")
                self._chunk_state = "size"
            elif self._chunk_state == "size":
                size = line.split(b";", 1)[0].strip()
                if not size or len(size) > 16 or size.strip(b"0123456789abcdefABCDEF"):
                    raise httpx.RemoteProtocolError(f"malformed chunk size {line[:40]!r}")
                self._left = int(size, 16)
                self._chunk_state = "data" if self._left else "trailers"
            elif not line:  # the empty line after the trailers: done
                self._mode = "none"
                return None
            else:  # a trailer line: read and dropped, but never without end
                self._trailer_bytes += len(line) + 2
                if self._trailer_bytes > MAX_TRAILER_BYTES:
                    raise httpx.RemoteProtocolError(f"chunked body trailers larger than {MAX_TRAILER_BYTES} bytes")

    def _line(self) -> bytes | None:
        end = self._buf.find(b"\r\n")
        if end < 0:
            if len(self._buf) > MAX_LINE_BYTES:
                raise httpx.RemoteProtocolError(f"chunked body line longer than {MAX_LINE_BYTES} bytes")
            return None
        line = bytes(self._buf[:end])
        del self._buf[: end + 2]
        return line

    def _more(self) -> bytes:
        if self._eof:
            raise httpx.RemoteProtocolError("server disconnected in the middle of a chunked body")
        return b""


def serialize_head(request: httpx.Request) -> bytes:
    """The request line and headers (httpx has set Host, Content-Length or Transfer-Encoding)."""
    lines = [request.method.encode("ascii") + b" " + request.url.raw_path + b" HTTP/1.1"]
    lines += [name + b": " + value for name, value in request.headers.raw]
    head = b"\r\n".join(lines) + b"\r\n\r\n"
    # No line break, NUL or stray blank may reach the wire (a header injected through a router header).
    breaks = len(lines) + 1
    if b"\0" in head or head.count(b"\n") != breaks or head.count(b"\r") != breaks or lines[0].count(b" ") != 2:
        raise httpx.LocalProtocolError("a request header or target holds a line break or NUL")
    return head
