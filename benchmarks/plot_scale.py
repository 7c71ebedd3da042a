"""Plot bench_scale's rows (its --json file) as docs/scale.png: how cost grows with the number of sessions.

Run: `.venv/bin/python -m benchmarks.plot_scale docs/scale-results.json docs/scale.png` (matplotlib:
benchmarks/requirements.txt).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main() -> None:
    source, target = Path(sys.argv[1]), Path(sys.argv[2])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(json.loads(source.read_text()), key=lambda r: r["sessions"])
    n = [r["sessions"] for r in rows]

    def apiserver_ms(r: dict[str, Any], side: str) -> float:
        """kube-apiserver CPU per object created (rows of bench_scale since it measures it)."""
        return float(((r.get("growth") or {}).get(side) or {}).get("cpu_ms_per_object", {}).get("kube-apiserver", 0.0))

    def side(r: dict[str, Any], which: str) -> dict[str, Any]:
        return dict((r.get("growth") or {}).get(which) or {})

    def own_s(r: dict[str, Any]) -> float:
        """The operator's own part of create -> Ready p50 (bench_scale's operator_part; rows since it traces)."""
        s, d = side(r, "sessions"), side(r, "direct")
        return float(sum(s.get(f"{k}_p50", 0.0) - d.get(f"{k}_p50", 0.0) for k in ("to_claim", "after_ready")))

    fig, axes = plt.subplots(1, 5, figsize=(21, 3.8))
    panels = [
        ("operator peak RSS (MiB)", [r["rss_mib"] for r in rows], 400, "target <= 400 MiB"),
        ("reap lag p99 (s)", [r["reap_p99"] for r in rows], 1.0, "target <= 1 s"),
        ("Ready per second", [r["session_rate"] for r in rows], None, ""),
        ("kube-apiserver CPU per object (ms)", [apiserver_ms(r, "sessions") for r in rows], None, ""),
        ("create -> Ready p50 (s)", [side(r, "sessions").get("latency_p50", 0.0) for r in rows], None, ""),
    ]
    for ax, (title, values, limit, label) in zip(axes, panels, strict=True):
        ax.plot(n, values, marker="o", label="AgentSessions (operator)")
        if title.startswith("operator peak RSS") and all("fresh" in r for r in rows):
            ax.plot(n, [r["fresh"]["peak_mib"] for r in rows], marker="^", label="a fresh replica taking over")
        if title.startswith("Ready"):
            ax.plot(n, [r["claim_rate"] for r in rows], marker="s", label="SandboxClaims created directly")
        if title.startswith("kube-apiserver"):
            ax.plot(n, [apiserver_ms(r, "direct") for r in rows], marker="s", label="SandboxClaims created directly")
        if title.startswith("create"):
            ax.plot(
                n,
                [side(r, "direct").get("latency_p50", 0.0) for r in rows],
                marker="s",
                label="SandboxClaims created directly",
            )
            if all("to_claim_p50" in side(r, "sessions") for r in rows):
                ax.plot(n, [own_s(r) for r in rows], marker="v", label="of it the operator's own part")
        if limit is not None:
            ax.axhline(limit, color="red", linestyle="--", linewidth=1, label=label)
        ax.set_xscale("log")
        ax.set_xlabel("live sessions")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("One operator replica on a kwok node, pause-image pools (bench_scale)")
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
