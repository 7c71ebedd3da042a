"""Benchmark the real node's image builds: cold (empty image cache) vs cached, per image.

Run as root: `.venv/bin/python -m benchmarks.bench_images`. The cold pass builds into a temporary
DEVCLUSTER_CACHE (the Go module and build caches stay warm, as on a developer machine); the cached
pass is the second call on the same cache.
"""

from __future__ import annotations

import io
import os
import tempfile
import time

from devcluster import errors, images

ORDER = ("python-base-bookworm", "python-base-trixie", *images.SERVED)


def run() -> dict[str, tuple[float, float]]:
    results: dict[str, tuple[float, float]] = {}
    saved = os.environ.get("DEVCLUSTER_CACHE")
    with tempfile.TemporaryDirectory(prefix="bench-images-") as cache:
        os.environ["DEVCLUSTER_CACHE"] = cache
        try:
            for name in ORDER:
                started = time.monotonic()
                images.build_image(images.IMAGES[name], io.StringIO())
                cold = time.monotonic() - started
                started = time.monotonic()
                images.build_image(images.IMAGES[name], io.StringIO())
                results[name] = (cold, time.monotonic() - started)
        finally:
            if saved is None:
                os.environ.pop("DEVCLUSTER_CACHE", None)
            else:
                os.environ["DEVCLUSTER_CACHE"] = saved
    return results


def main() -> None:
    results = run()
    print(f"{'image':<26} {'cold s':>8} {'cached s':>9}")
    for name, (cold, cached) in results.items():
        print(f"{name:<26} {cold:>8.1f} {cached:>9.2f}")
    total_cold = sum(cold for cold, _ in results.values())
    total_cached = sum(cached for _, cached in results.values())
    print(f"{'all images':<26} {total_cold:>8.1f} {total_cached:>9.2f}")


if __name__ == "__main__":
    errors.run(main)  # a missing package or failed build: one line, exit 1
