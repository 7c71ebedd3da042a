"""Run the shipped Argo CD health checks (config/argocd/resource_customizations) with a real Lua 5.1.

Argo CD evaluates them with gopher-lua (Lua 5.1) and the object as the global ``obj``; here the object
becomes a Lua table literal and ``lua5.1`` (Debian's, devcluster/prereqs.py group ``ops``) runs the
script, printing the status and the message.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CUSTOMIZATIONS = ROOT / "config" / "argocd" / "resource_customizations"
GROUP = "agentsession.dev"
KINDS = ("AgentSession", "AgentSessionPolicy")
LUA = "lua5.1"

_DRIVER = """
local check = assert(loadfile(arg[1]))
obj = %s
local hs = check()
io.write(hs.status, "\\n", hs.message or "", "\\n")
"""


@dataclass(frozen=True)
class Health:
    status: str
    message: str


def script(kind: str) -> Path:
    return CUSTOMIZATIONS / GROUP / kind / "health.lua"


def lua_literal(value: Any) -> str:
    """A JSON value as a Lua 5.1 table literal (null: nil, as Argo CD's JSON-to-Lua conversion does)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + "".join(_escape(ch) for ch in value.encode()) + '"'
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, dict):
        items = (f"[{lua_literal(str(k))}] = {lua_literal(v)}" for k, v in value.items() if v is not None)
        return "{" + ", ".join(items) + "}"
    raise TypeError(f"not a JSON value: {value!r}")


def _escape(byte: int) -> str:
    # Printable ASCII as is (except the two that end or escape a string); every other byte decimal.
    if 32 <= byte < 127 and byte not in (34, 92):
        return chr(byte)
    return f"\\{byte:03d}"


def health(kind: str, obj: dict[str, Any]) -> Health:
    if shutil.which(LUA) is None:
        raise RuntimeError(f"{LUA} is missing: run `python -m devcluster.prereqs ops` (Debian package lua5.1)")
    # Round-trip through JSON first: timestamps and the like become strings, as Argo CD sees them.
    literal = lua_literal(json.loads(json.dumps(obj, default=str)))
    done = subprocess.run(
        [LUA, "-", str(script(kind))], input=_DRIVER % literal, capture_output=True, text=True, timeout=30
    )
    if done.returncode != 0:
        raise RuntimeError(f"{LUA} {script(kind)} failed: {done.stderr.strip()}")
    status, message = done.stdout.split("\n", 1)
    return Health(status, message.rstrip("\n"))
