"""The probe: one script (`scripts/probe.sh`) that learns what the runtime at an endpoint offers, and
`RuntimeInfo`, what it learned (base directory, watchdog runner, limits, GNU grep, staged wrappers, the
pod's addresses and identity token). Pure: `build_probe` returns the runtime command string,
`parse_probe` turns its stdout into a `RuntimeInfo`.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass
from typing import Final, Literal

from agentsession_api.names import POD_IDENTITY_TOKEN_PATH

from .errors import MalformedResponse
from .protocol import (
    PROBE_BASE,
    PROBE_BASE64,
    PROBE_DASH,
    PROBE_GNU_GREP,
    PROBE_GREP,
    PROBE_GROUP,
    PROBE_HOST,
    PROBE_IDTOKEN,
    PROBE_LIMIT,
    PROBE_MARKER,
    PROBE_RUNNER,
    PROBE_SH,
    PROBE_UNKNOWN_LIMIT,
    PROBE_V4,
    PROBE_V6,
    PROBE_WRAPPERS,
    PROBE_YES,
    RUNTIME_DEFAULT_LIMIT,
    STAGING_DIRNAME,
)
from .script_text import load_script, sh_command

Runner = Literal["timeout", "python3", "none"]


_PROBE_SCRIPT: Final = load_script("probe.sh")


@dataclass(frozen=True)
class RuntimeInfo:
    """What the probe learned about the runtime at an endpoint."""

    base_dir: str
    hostname: str
    runner: Runner
    has_base64: bool = True
    exec_limit: float | None = None
    """Seconds after which the runtime itself kills a command's whole process group
    (SANDBOX_EXEC_TIMEOUT_SECONDS, default 300); None when the runtime is not known to."""
    gnu_grep: bool = False
    """GNU grep is there: grep() uses it (see `build_gnu_grep`)."""
    wrappers: frozenset[str] = frozenset()
    """The staged command wrappers found in the staging dir (see `UserCommand.staged`)."""
    stages_wrappers: bool = False
    """`sh` is dash: wrappers are staged (bash would name the sourced file in the command's error messages)."""
    addresses: tuple[str, ...] = ()
    """The pod's own addresses, as networks (`10.244.1.17/32`, a shared loopback range `127.0.0.0/8`);
    empty when its kernel shows none (the identity check then rests on the pod name)."""
    identity_token: str = ""
    """The pod's identity token (`pod_identity`), empty when the pod has none."""

    def holds(self, ip: str) -> bool:
        """`ip` is one of the pod's own addresses."""
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            return False
        return any(address in ipaddress.ip_network(net) for net in self.addresses)

    def shows_family_of(self, ip: str) -> bool:
        """The pod showed addresses of `ip`'s family (gVisor's kernel has no fib_trie: no IPv4 list)."""
        try:
            version = ipaddress.ip_address(ip).version
        except ValueError:
            return False
        return any(ipaddress.ip_network(net).version == version for net in self.addresses)

    @property
    def staging_dir(self) -> str:
        return f"{self.base_dir.rstrip('/')}/{STAGING_DIRNAME}"

    def runner_for(self, timeout: int) -> Runner:
        """The in-pod watchdog a command with this timeout needs.

        "none" when the runtime's own kill comes first anyway (`timeout` at or above
        its limit: the default 300 s equals the runtime's default): the wrapper then
        spawns no watchdog and the runtime's kill is reported as the timeout, without
        the output (the runtime answers nothing but its error then; a watchdog set
        at that same limit would fire later, so this loses nothing).
        """
        if self.exec_limit is not None and timeout >= self.exec_limit:
            return "none"
        return self.runner


def build_probe() -> str:
    return sh_command(_PROBE_SCRIPT, STAGING_DIRNAME, POD_IDENTITY_TOKEN_PATH)


def parse_probe(stdout: str) -> RuntimeInfo:
    lines = stdout.splitlines()
    if not lines or lines[0] != PROBE_MARKER:
        raise MalformedResponse(f"unexpected probe output from the runtime: {stdout[:200]!r}")
    fields = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
    base = fields.get(PROBE_BASE, "")
    if not base.startswith("/"):
        raise MalformedResponse(f"runtime reported no usable base directory: {base!r}")
    runner = fields.get(PROBE_RUNNER, "none")
    return RuntimeInfo(
        base_dir=base,
        hostname=fields.get(PROBE_HOST, ""),
        runner=runner if runner in ("timeout", "python3") else "none",  # type: ignore[arg-type]
        has_base64=fields.get(PROBE_BASE64) == PROBE_YES,
        gnu_grep=fields.get(PROBE_GREP) == PROBE_GNU_GREP,
        exec_limit=_exec_limit(fields.get(PROBE_LIMIT)) if fields.get(PROBE_GROUP) == PROBE_YES else None,
        wrappers=frozenset(fields.get(PROBE_WRAPPERS, "").split()),
        stages_wrappers=fields.get(PROBE_SH) == PROBE_DASH,
        addresses=_addresses(fields.get(PROBE_V4, ""), fields.get(PROBE_V6, "")),
        identity_token=fields.get(PROBE_IDTOKEN, ""),
    )


def _addresses(v4: str, v6: str) -> tuple[str, ...]:
    """The probe's `v4=` networks and `v6=` hex addresses, normalised and deduplicated (the kernel lists
    each local route in two tables); anything unparsable is left out."""
    found: dict[str, None] = {}
    for text in v4.split():
        try:
            found[str(ipaddress.ip_network(text, strict=False))] = None
        except ValueError:
            continue
    for text in v6.split():
        try:
            found[f"{ipaddress.IPv6Address(int(text, 16))}/128"] = None
        except ValueError:
            continue
    return tuple(found)


def _exec_limit(raw: str | None) -> float | None:
    """SANDBOX_EXEC_TIMEOUT_SECONDS as the runtime reads it: 300 unless a finite number > 0."""
    if raw is None or raw == PROBE_UNKNOWN_LIMIT:
        return None
    try:
        value = float(raw)
    except ValueError:
        return RUNTIME_DEFAULT_LIMIT
    return value if math.isfinite(value) and value > 0 else RUNTIME_DEFAULT_LIMIT
