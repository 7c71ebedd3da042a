"""Sans-IO operations against one runtime: generators of `HttpRequest`s.

An operation is a generator that yields the requests it needs, receives each
`HttpResponse`, and returns its result. The sync and async drivers in `transport`
run the very same generators, so every multi-step protocol (probe, upload =
POST /upload then finalize, download = prepare, GET staged files, clean up) is
written once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from . import commands, probe, wire
from .commands import CommandResult
from .errors import SandboxError, WrongPod
from .pod_identity import PodIdentity
from .probe import RuntimeInfo
from .protocol import (
    CAPTURE_SWEEP_EVERY,
    DOWNLOAD_INLINE_BUDGET,
    DOWNLOAD_INLINE_MAX,
    EXECUTE_READ_MARGIN,
    FILE_NOT_FOUND,
    STAGING_DIRNAME,
    STATUS_NOT_FOUND,
    STATUS_OK,
)
from .wire import HttpRequest, HttpResponse, RuntimeExec

T = TypeVar("T")
Op = Generator[HttpRequest, HttpResponse, T]
"""A sans-IO operation returning T."""


@dataclass(frozen=True)
class Downloaded:
    content: bytes | None
    error: str | None


class RuntimeProtocol:
    """Connection state for one endpoint (what the probe learned) and the operations.

    Holds no sockets; `info` is None until `connect()` ran, and is reset by
    `invalidate()` so the next operation probes (and checks identity) again.
    """

    def __init__(
        self,
        expected_hostname: str | None = None,
        expected_ips: tuple[str, ...] = (),
        identity: PodIdentity | None = None,
    ) -> None:
        self.expected_hostname = expected_hostname
        self.expected_ips = expected_ips
        self.identity = identity
        self.info: RuntimeInfo | None = None
        # Capture files are named per client (and per call number), so one client's sweep never
        # touches another's; the probe sweeps what a vanished client left (files over 2 hours old).
        self.capture = f"o.{uuid.uuid4().hex[:12]}"
        self._commands = 0
        self._staged: set[str] = set()  # wrappers known to be in the pod (reset by every probe)
        self._staging_fails = False  # the pod refused a wrapper: send the script with each call

    def invalidate(self) -> None:
        self.info = None

    # -- connection ------------------------------------------------------------------

    def connect(self) -> Op[RuntimeInfo]:
        """Probe the runtime and verify it is the expected pod (raises WrongPod)."""
        result = yield from self.script(probe.build_probe(), idempotent=True)
        info = probe.parse_probe(result.stdout)
        if self.identity is not None:
            self.info = None
            self.identity.check(info.identity_token)  # raises UnverifiedPod: nothing of the session was sent
        if self.expected_hostname and info.hostname != self.expected_hostname:
            self.info = None
            raise WrongPod(self.expected_hostname, info.hostname, self.expected_ips, info.addresses)
        # A name is unique only within a namespace: the pod must also hold an IP the API gave the session's
        # pod, judged in the address families its kernel shows (none shown: judged by its name alone).
        judged = [ip for ip in self.expected_ips if info.shows_family_of(ip)]
        if judged and not any(info.holds(ip) for ip in judged):
            self.info = None
            raise WrongPod(self.expected_hostname or "", info.hostname, self.expected_ips, info.addresses)
        self.info = info
        self._staged = set(info.wrappers)
        return info

    def ensure(self) -> Op[RuntimeInfo]:
        if self.info is None:
            return (yield from self.connect())
        return self.info

    def health(self) -> Op[bool]:
        resp = yield wire.health_request()
        return wire.health_ok(resp)

    # -- commands --------------------------------------------------------------------

    def script(self, command: str, *, idempotent: bool, read_timeout: float | None = None) -> Op[RuntimeExec]:
        """Run an internal, already-quoted runtime command and return the runtime's answer."""
        resp = yield wire.execute_request(
            command, read_timeout=read_timeout or wire.CONTROL_READ_TIMEOUT, idempotent=idempotent
        )
        return wire.parse_execute_response(resp)

    def staged_script(self, content: bytes, build: Callable[[str], str]) -> Op[RuntimeExec]:
        """Upload `content` to a staging file, then run `build(staged_path)` (which must remove it)."""
        info = yield from self.ensure()
        name = f"in-{uuid.uuid4().hex}"
        resp = yield wire.upload_request(f"{STAGING_DIRNAME}/{name}", content)
        error = wire.upload_error(resp)
        if error is not None:
            raise SandboxError(error)
        return (yield from self.script(build(f"{info.staging_dir}/{name}"), idempotent=False))

    def execute(self, command: str, *, timeout: int, max_output: int, cwd: str = "") -> Op[CommandResult]:
        """Run a user command under `sh`, killed in the pod at its timeout; never retried.

        Below the runtime's own limit an in-pod watchdog kills the command (the
        output so far is kept); at or above it the runtime's kill comes first and is
        reported as the timeout, with the output lost (see `RuntimeInfo.runner_for`).
        """
        info = yield from self.ensure()
        runner = info.runner_for(timeout)
        self._commands += 1
        wrapped = commands.user_command(
            command,
            timeout=timeout,
            max_output=max_output,
            staging_dir=info.staging_dir,
            cwd=cwd,
            runner=runner,
            has_base64=info.has_base64,
            capture=self.capture,
            seq=self._commands,
            sweep=CAPTURE_SWEEP_EVERY if self._commands % CAPTURE_SWEEP_EVERY == 1 else 0,
        )
        read_timeout = timeout + EXECUTE_READ_MARGIN
        raw: RuntimeExec | None = None
        for _ in range(2):
            if not (yield from self._stage_wrapper(info, wrapped)):
                break
            raw = yield from self.script(wrapped.staged(), idempotent=False, read_timeout=read_timeout)
            if not commands.wrapper_missing(raw.stdout, raw.stderr, raw.exit_code, wrapped.wrapper):
                break
            # Removed since the probe saw it: nothing ran, so the call goes again with the wrapper staged anew.
            self._staged.discard(wrapped.wrapper)
            raw = None
        if raw is None:
            raw = yield from self.script(wrapped.inline(), idempotent=False, read_timeout=read_timeout)
        return commands.parse_user_command(
            raw.stdout, raw.stderr, raw.exit_code, timeout=timeout, max_output=max_output, runner=runner
        )

    def _stage_wrapper(self, info: RuntimeInfo, wrapped: commands.UserCommand) -> Op[bool]:
        """Make sure the wrapper is in the pod (once per wrapper and pod: it is named by its content and
        stays); False when the pod refuses it, and from then on for this connection."""
        if wrapped.wrapper in self._staged:
            return True
        if self._staging_fails or not info.stages_wrappers:
            return False
        temporary = f"{wrapped.wrapper}.{uuid.uuid4().hex}"
        resp = yield wire.upload_request(f"{STAGING_DIRNAME}/{temporary}", wrapped.script.encode())
        if wire.upload_error(resp) is None:
            staging = info.staging_dir
            raw = yield from self.script(
                commands.build_stage_wrapper(f"{staging}/{temporary}", f"{staging}/{wrapped.wrapper}"),
                idempotent=False,
            )
            if raw.exit_code == 0:
                self._staged.add(wrapped.wrapper)
                return True
        self._staging_fails = True
        return False

    # -- files -----------------------------------------------------------------------

    def upload(self, items: Sequence[tuple[str, bytes, str]]) -> Op[list[str | None]]:
        """Write files: items are (absolute target, content, confinement root or "").

        Each content goes to a unique staging file through `POST /upload` (raw
        bytes, no size limit, no shell quoting), then one script moves every staged
        file into place and reports an error code per file. Returns None per success.
        """
        info = yield from self.ensure()
        results: list[str | None] = [None] * len(items)
        token = uuid.uuid4().hex
        staged: list[tuple[str, str, str]] = []
        positions: list[int] = []
        for index, (target, content, confine) in enumerate(items):
            name = f"up-{token}-{index}"
            resp = yield wire.upload_request(f"{STAGING_DIRNAME}/{name}", content)
            error = wire.upload_error(resp)
            if error is not None:
                results[index] = error
                continue
            staged.append((f"{info.staging_dir}/{name}", target, confine))
            positions.append(index)
        if staged:
            raw = yield from self.script(commands.build_upload_finalize(staged), idempotent=False)
            codes = commands.parse_upload_finalize(raw.stdout, len(staged))
            for index, code in zip(positions, codes, strict=True):
                results[index] = code
        return results

    def download(self, items: Sequence[tuple[str, str]]) -> Op[list[Downloaded]]:
        """Read files: items are (absolute path, confinement root or "")."""
        info = yield from self.ensure()
        prep_cmd = commands.build_download_prepare(
            items,
            staging_dir=info.staging_dir,
            token=uuid.uuid4().hex,
            inline_max=DOWNLOAD_INLINE_MAX,
            inline_budget=DOWNLOAD_INLINE_BUDGET,
        )
        raw = yield from self.script(prep_cmd, idempotent=True, read_timeout=wire.TRANSFER_READ_TIMEOUT)
        preps = commands.parse_download_prepare(raw.stdout, len(items))
        staged = [f"{info.staging_dir}/{prep.staged}" for prep in preps if prep.staged is not None]
        results: list[Downloaded] = []
        try:
            for prep in preps:
                if prep.staged is None:
                    results.append(Downloaded(prep.content, prep.error))
                    continue
                resp = yield wire.download_request(f"{STAGING_DIRNAME}/{prep.staged}")
                if resp.status == STATUS_OK:
                    results.append(Downloaded(resp.content, None))
                elif resp.status == STATUS_NOT_FOUND:
                    results.append(Downloaded(None, FILE_NOT_FOUND))
                else:
                    raise SandboxError(f"runtime /download answered HTTP {resp.status}")
        except Exception:
            # Not `finally`: a closed generator (cancellation) must not yield; the
            # next probe sweeps what is left behind.
            if staged:
                yield from self.script(commands.build_remove(staged), idempotent=True)
            raise
        if staged:
            yield from self.script(commands.build_remove(staged), idempotent=True)
        return results
