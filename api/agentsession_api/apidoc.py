"""Generate docs/api-reference.md from the CRDs (themselves generated from types.py): every field, its type,
default, bounds and validation messages. `python -m agentsession_api.apidoc [--check]`."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CRDS = ("agentsession.dev_agentsessions.yaml", "agentsession.dev_agentsessionpolicies.yaml")
OUT = ROOT / "docs" / "api-reference.md"


def _type(schema: dict[str, Any]) -> str:
    kind = schema.get("type", "object")
    if kind == "array":
        return f"[]{_type(schema.get('items') or {})}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map[string]{_type(schema['additionalProperties'])}"
    if "enum" in schema:
        return " \\| ".join(str(v) for v in schema["enum"])
    return str(kind)


def _rules(schema: dict[str, Any]) -> str:
    parts = []
    for key, label in (
        ("maxLength", "≤ {} chars"),
        ("maxItems", "≤ {} items"),
        ("maxProperties", "≤ {} entries"),
        ("minimum", "≥ {}"),
        ("maximum", "≤ {}"),
    ):
        if key in schema:
            parts.append(label.format(schema[key]))
    if "default" in schema:
        parts.append(f"default `{schema['default']}`")
    for rule in schema.get("x-kubernetes-validations") or []:
        parts.append(rule.get("message", rule["rule"]))
    return "; ".join(parts)


def _rows(schema: dict[str, Any], path: str, required: set[str], out: list[str]) -> None:
    for name, sub in (schema.get("properties") or {}).items():
        field = f"{path}.{name}" if path else name
        description = " ".join(str(sub.get("description", "")).split()).replace("|", "\\|")
        rules = _rules(sub).replace("|", "\\|")
        req = "yes" if name in required else ""
        out.append(f"| `{field}` | {_type(sub)} | {req} | {description} | {rules} |")
        target = sub.get("items") if sub.get("type") == "array" else sub
        if isinstance(target, dict) and target.get("properties"):
            _rows(target, field + ("[]" if sub.get("type") == "array" else ""), set(target.get("required") or []), out)


def render() -> str:
    lines = ["# API reference (generated: `python -m agentsession_api.apidoc`; do not edit)", ""]
    for name in CRDS:
        crd = yaml.safe_load((ROOT / "crds" / name).read_text())
        version = crd["spec"]["versions"][0]
        schema = version["schema"]["openAPIV3Schema"]
        kind = crd["spec"]["names"]["kind"]
        short = ", ".join(crd["spec"]["names"].get("shortNames") or [])
        lines += [
            f"## {kind} ({crd['spec']['group']}/{version['name']}, short name `{short}`)",
            "",
            " ".join(str(schema.get("description", "")).split()),
            "",
        ]
        for part in ("spec", "status"):
            sub = schema["properties"][part]
            lines += [
                f"### {part}",
                "",
                "| field | type | required | description | validation |",
                "|---|---|---|---|---|",
            ]
            rows: list[str] = []
            _rows(sub, part, set(sub.get("required") or []), rows)
            lines += rows
            for rule in sub.get("x-kubernetes-validations") or []:
                lines.append(f"\nRule on `{part}`: {rule.get('message', rule['rule'])}")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail when docs/api-reference.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            sys.stdout.writelines(
                difflib.unified_diff(current.splitlines(True), text.splitlines(True), str(OUT), "generated")
            )
            print("\ndocs/api-reference.md is out of date: run `make crds`", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
