"""The in-pod protocol, once for both clients: every constant and rule the Python client and the TypeScript
client (client-ts) must agree on to talk to a pod's python runtime.

Pure data (and one pure rule, `content_codings_readable`): no I/O, nothing of the project imported. The
Python modules import from here (`wire`, `limits`, `transport`, `runtime`, `probe`, `commands`, ...);
``python -m langchain_k8s_client.protocol_tsgen`` (`make crds`) writes every public UPPER_CASE name below
into ``client-ts/src/generated/protocol.ts``, which the TypeScript client imports instead of retyping it
(tests/unit/client/test_client_protocol_tsgen.py fails when the committed file is stale).

Seconds are floats, sizes bytes. A name's meaning must not depend on the language: a rule that is code in
both clients (how `Content-Encoding` is judged, how a retry waits) is spelled here as data and checked
against both by client-ts/test/cross-language.test.ts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

# ---------------------------------------------------------------------------- the runtime's HTTP API

RUNTIME_PORT: Final = 8888
"""The port the runtime listens on in the pod (the session's pod IP, or the router's X-Sandbox-Port)."""

HEALTH_PATH: Final = "/"
"""`GET /`: 200 when the runtime is up."""

EXECUTE_PATH: Final = "/execute"
"""`POST /execute` with the JSON object `{EXECUTE_COMMAND: ...}` (ASCII JSON: lone surrogates survive)."""

UPLOAD_PATH: Final = "/upload"
"""`POST /upload`, multipart: one part named `UPLOAD_FIELD`, its file name relative to the base dir."""

DOWNLOAD_PATH: Final = "/download/"
"""`GET /download/<relative path, percent-quoted, "/" kept>`."""

EXECUTE_COMMAND: Final = "command"
"""The one field of an `/execute` request."""

EXECUTE_STDOUT: Final = "stdout"
EXECUTE_STDERR: Final = "stderr"
EXECUTE_EXIT_CODE: Final = "exit_code"
"""The fields of an `/execute` answer: two strings and an integer, anything else is garbage."""

UPLOAD_FIELD: Final = "file"
"""The multipart field `/upload` reads."""

UPLOAD_CONTENT_TYPE: Final = "application/octet-stream"
"""The content type of the uploaded part."""

JSON_CONTENT_TYPE: Final = "application/json"
"""The content type of an `/execute` request."""

STATUS_OK: Final = 200
"""The runtime's success; any other status of `/execute` or `/upload` is a failure."""

STATUS_NOT_FOUND: Final = 404
"""`/download` of a staged file that is gone: the file's error is `FILE_NOT_FOUND`."""

GATEWAY_STATUSES: Final = (502, 503, 504)
"""A gateway (the router) answered for the pod: idempotent requests are retried, others fail."""

# ---------------------------------------------------------------------------- headers and content codings

ACCEPT_ENCODING_HEADER: Final = "Accept-Encoding"
"""Sent with every request, `IDENTITY`, replacing any the caller's extra headers carry."""

CONTENT_ENCODING_HEADER: Final = "Content-Encoding"
"""Judged by `content_codings_readable` before an answer's body is read."""

CONTENT_TYPE_HEADER: Final = "Content-Type"
"""`JSON_CONTENT_TYPE` on `/execute`, multipart on `/upload`."""

CONTENT_LENGTH_HEADER: Final = "Content-Length"
"""An answer declaring more than its `max_bytes` is refused before its body is read."""

IDENTITY: Final = "identity"
"""The only content coding asked for (`Accept-Encoding`) and read (`Content-Encoding`)."""

READABLE_CONTENT_CODINGS: Final = (IDENTITY,)
"""The content codings an answer may name and still be read: no decoder ever runs on a pod's bytes (a
decoder expands a received chunk before `max_bytes` can count it). An answer naming any other is refused
before its body is read (`MalformedResponse`)."""

HEADER_LIST_SEPARATOR: Final = ","
"""A header field's list elements (RFC 9110 5.6.1), across all its lines (each line is such a list)."""

HEADER_WHITESPACE: Final = " \t"
"""Optional whitespace around a list element (OWS: space and horizontal tab, nothing else)."""


def content_codings_readable(values: Iterable[str]) -> bool:
    """Whether an answer whose `Content-Encoding` lines are `values` may be read: every list element,
    stripped of `HEADER_WHITESPACE` and compared case-insensitively (ASCII: content codings are
    case-insensitive tokens), is empty or one of `READABLE_CONTENT_CODINGS`. No lines: read."""
    for value in values:
        for element in value.split(HEADER_LIST_SEPARATOR):
            token = element.strip(HEADER_WHITESPACE)
            if token and not (token.isascii() and token.lower() in READABLE_CONTENT_CODINGS):
                return False
    return True


# ---------------------------------------------------------------------------- time and size bounds

CONNECT_TIMEOUT: Final = 5.0
"""Seconds to open a connection; a request that never connected provably never left (sent once more)."""

CONTROL_READ_TIMEOUT: Final = 30.0
"""Read timeout of short control requests (probe, staging cleanup, small scripts)."""

TRANSFER_READ_TIMEOUT: Final = 300.0
"""Read timeout of file transfers (upload, download, the download's prepare script)."""

EXECUTE_READ_MARGIN: Final = 30.0
"""Seconds the HTTP read waits beyond a command's timeout (the wrapper still has to encode and answer)."""

GREP_READ_MARGIN: Final = 30.0
"""Seconds the HTTP read of a grep waits beyond `GREP_TIME_BUDGET`."""

DEFAULT_MAX_RESPONSE_BYTES: Final = 256 * 1024 * 1024
"""Largest answer read from a pod (a staged download is one answer): 256 MiB."""

DEFAULT_SLACK_SECONDS: Final = 30.0
"""Seconds an answer may take beyond its request's read timeout, in total (from sending to the last byte)."""

# ---------------------------------------------------------------------------- retries

RETRY_ATTEMPTS: Final = 4
"""Attempts of an idempotent request (the first included) on a connection error or a `GATEWAY_STATUSES`
answer; a command or write is sent once (again only when it provably never left, to the re-resolved pod)."""

RETRY_BASE_DELAY: Final = 0.1
"""Seconds before the first retry (doubled for each next one)."""

RETRY_MAX_DELAY: Final = 1.0
"""The longest wait between two attempts, before the jitter."""

RETRY_JITTER: Final = (0.5, 1.0)
"""The wait before retry n (0-based): min(RETRY_MAX_DELAY, RETRY_BASE_DELAY * 2**n) times a uniform
factor in [RETRY_JITTER[0], RETRY_JITTER[1])."""

# ---------------------------------------------------------------------------- staging and transfers

STAGING_DIRNAME: Final = ".lkc-staging"
"""Directory under the runtime's base dir for capture files, upload/download staging and wrappers."""

WRAPPER_PREFIX: Final = "w-"
"""Staged command wrappers are `w-<20 hex of the script's sha256>.sh` in the staging dir."""

CAPTURE_SWEEP_EVERY: Final = 32
"""Every this many commands (the 1st, the 33rd, ...), the wrapper removes the client's used capture
files and creates the next ones, in the background (see scripts/encode.sh)."""

DOWNLOAD_INLINE_MAX: Final = 512 * 1024
"""Files up to this size come back inside the prepare answer (measured faster below ~1 MiB)."""

DOWNLOAD_INLINE_BUDGET: Final = 2 * 1024 * 1024
"""Total inline bytes per download batch; the rest goes through staging."""

EDIT_INLINE_MAX: Final = 8 * 1024
"""Edit payloads up to this many bytes ride in the command; bigger ones are uploaded first."""

GREP_MATCH_LIMIT: Final = 10_000
"""Matches returned at most when the caller sets no `max_count` (then `truncated`)."""

GREP_TIME_BUDGET: Final = 20.0
"""Seconds a grep walks before it stops and reports `truncated` (below deepagents' 35 s async cap)."""

# ---------------------------------------------------------------------------- the probe (scripts/probe.sh)

PROBE_MARKER: Final = "@LKCP"
"""The first line of the probe's answer; `<field>=<value>` lines follow."""

PROBE_BASE: Final = "base"
PROBE_HOST: Final = "host"
PROBE_RUNNER: Final = "runner"
PROBE_BASE64: Final = "base64"
PROBE_GREP: Final = "grep"
PROBE_GROUP: Final = "group"
PROBE_LIMIT: Final = "limit"
PROBE_WRAPPERS: Final = "wrappers"
PROBE_SH: Final = "sh"
PROBE_V4: Final = "v4"
PROBE_V6: Final = "v6"
PROBE_IDTOKEN: Final = "idtoken"
"""The probe's fields: base directory, hostname, watchdog runner, base64 present ("1"), grep flavour
("gnu"), process groups killed by the runtime ("1") and its limit ("?": unknown), staged wrappers
(space-separated), `sh` flavour ("dash": wrappers are staged), IPv4 networks, IPv6 hex addresses, the pod's
identity token."""

PROBE_YES: Final = "1"
PROBE_GNU_GREP: Final = "gnu"
PROBE_DASH: Final = "dash"
PROBE_UNKNOWN_LIMIT: Final = "?"
"""The probe's values: yes (base64, group), GNU grep, dash as `sh`, the runtime's limit unknown."""

RUNNERS: Final = ("timeout", "python3", "none")
"""The in-pod watchdogs, best first; "none": the runtime's own kill is the only one."""

RUNTIME_DEFAULT_LIMIT: Final = 300.0
"""The runtime's own per-command limit when SANDBOX_EXEC_TIMEOUT_SECONDS is unset or invalid."""

# ---------------------------------------------------------------------------- commands and exit codes

DEFAULT_COMMAND_TIMEOUT: Final = 300
"""A command's timeout when the caller gives none (seconds; equals the runtime's default limit)."""

MAX_COMMAND_TIMEOUT: Final = 3600
"""The longest timeout a command may ask for."""

DEFAULT_MAX_OUTPUT: Final = 1024 * 1024
"""Bytes of a command's output kept (the rest is cut, and said so)."""

WRAPPER_MARKER: Final = "@LKC"
"""The wrapper's answer line: `@LKC <exit code> <stdout bytes> <flags>`, then the encoded output."""

WRAPPER_ERROR_MARKER: Final = "@LKC! "
"""The wrapper's own failure, its message after the marker."""

RUNTIME_TIMEOUT_EXIT: Final = 124
"""The exit code of a command killed at its timeout (as coreutils' timeout reports it)."""

SIGKILLED_EXIT: Final = 128 + 9
"""The exit code of a command killed by SIGKILL (the note `SIGKILLED_NOTE` explains it)."""

SIGKILLED_NOTE: Final = (
    "Error: exit code 137 before the timeout: the command was killed by SIGKILL (unless it exited 137 itself), "
    "in a sandbox most likely by the kernel's out of memory (OOM) killer, the command having used more memory "
    "than the sandbox's memory limit (else by a `kill -9`). Use less memory, or a template with a higher limit."
)
"""Said of a command that died of SIGKILL before its timeout: nothing but the OOM killer (or a `kill -9`)
sends it, and the shell prints nothing then, so without this the caller sees exit 137 and no output."""

GREP_KILLED: Final = (-9, 128 + 9)
"""The exit codes of a grep the watchdog killed at `GREP_TIME_BUDGET` (its partial answer is kept)."""

# ---------------------------------------------------------------------------- file operations

FILE_NOT_FOUND: Final = "file_not_found"
PERMISSION_DENIED: Final = "permission_denied"
IS_DIRECTORY: Final = "is_directory"
INVALID_PATH: Final = "invalid_path"
FILE_ERRORS: Final = (FILE_NOT_FOUND, PERMISSION_DENIED, IS_DIRECTORY, INVALID_PATH)
"""The error codes of a file operation (deepagents' FileOperationError)."""

# ---------------------------------------------------------------------------- the pod's identity token

CLOCK_SKEW: Final = 60.0
"""Seconds of clock difference tolerated on a pod identity token's times."""

MAX_TOKEN_BYTES: Final = 16 * 1024
"""Largest pod identity token read from the probe's answer."""
