"""Formatting AgentSessions like kubectl does: a table (default, wide), json, yaml, name."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from agentsession_api import names

COLUMNS = ("NAME", "PHASE", "POOL", "POD-IP", "EXPIRES", "AGE")
WIDE = ("POD", "CLAIM", "REASON")


def age(timestamp: str | None, now: dt.datetime) -> str:
    """kubectl's short ages: 42s, 5m, 3h, 2d."""
    if not timestamp:
        return "<unknown>"
    then = dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def row(body: Mapping[str, Any], now: dt.datetime, wide: bool = False) -> list[str]:
    meta, spec, status = body["metadata"], body.get("spec") or {}, body.get("status") or {}
    resolved = status.get("resolved") or {}
    pool = (spec.get("warmPoolRef") or resolved.get("warmPoolRef") or {}).get("name")
    ready: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    cells = [
        meta["name"],
        status.get("phase") or "Pending",
        pool or "<none>",
        (status.get("podIPs") or ["<none>"])[0],
        status.get("expiresAt") or "<none>",
        age(meta.get("creationTimestamp"), now),
    ]
    if wide:
        cells += [status.get("podName") or "<none>", status.get("claimName") or "<none>", ready.get("reason") or ""]
    return cells


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["   ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
    return "\n".join(lines) + "\n"


def render(items: Sequence[Mapping[str, Any]], output: str | None, *, single: bool, now: dt.datetime) -> str:
    """What `list` (single=False) or `get` (single=True) prints."""
    clean = [_without_managed_fields(i) for i in items]
    if output == "json":
        doc: Any = clean[0] if single else {"apiVersion": "v1", "kind": "List", "items": clean}
        return json.dumps(doc, indent=2) + "\n"
    if output == "yaml":
        doc = clean[0] if single else {"apiVersion": "v1", "kind": "List", "items": clean}
        return str(yaml.safe_dump(doc, sort_keys=False))
    if output == "name":
        return "".join(f"{names.SESSION_PLURAL}.{names.GROUP}/{i['metadata']['name']}\n" for i in clean)
    if not clean:
        return ""
    wide = output == "wide"
    return table([row(i, now, wide) for i in clean], COLUMNS + (WIDE if wide else ()))


def _without_managed_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(body)
    out["metadata"] = {k: v for k, v in body.get("metadata", {}).items() if k != "managedFields"}
    return out
