"""The pod's HTTP/1.1 transport (`langchain_k8s_client.http11`), this checkout's against another's, side by side.

One keep-alive loopback server answers a small POST (an `/execute` body's size, a 100-byte JSON answer); each
round runs a fresh process per side (its PYTHONPATH the side's client), the order reversed every other round,
and each process times REQUESTS requests through `PodHTTPTransport` (sync) and `AsyncPodHTTPTransport`
(async) after a warm-up. Printed: the median per-request microseconds of each side and their ratio; the
results file keeps every round's median. Written for issue 50 item 3 (the transport written once, its sync
twin generated): the same speed as the hand-written twins, within noise.

Run: `.venv/bin/python -m benchmarks.bench_http11 --before /tmp/before [--rounds 7]` with /tmp/before a
checkout (`git worktree add /tmp/before <commit>`); without --before, this checkout alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUESTS = 2000
BODY = json.dumps({"command": "sh -c true", "timeout": 300}).encode()
ANSWER = json.dumps({"stdout": "", "stderr": "", "exit_code": 0, "pad": "x" * 40}).encode()


def serve(listener: socket.socket) -> None:
    """Answer every request on every connection, keep-alive, until the listener closes."""

    def connection(conn: socket.socket) -> None:
        buffered = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buffered:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffered += data
                head, _, buffered = buffered.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                while len(buffered) < length:
                    buffered += conn.recv(65536)
                buffered = buffered[length:]
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER))

    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=connection, args=(conn,), daemon=True).start()


def worker(url: str) -> dict[str, float | str]:
    """This process's client: median microseconds per request, sync and async."""
    import httpx

    from langchain_k8s_client.http11 import AsyncPodHTTPTransport, PodHTTPTransport

    def timed_sync() -> list[float]:
        with httpx.Client(transport=PodHTTPTransport(), trust_env=False) as client:
            for _ in range(100):
                client.post(url, content=BODY).read()
            times = []
            for _ in range(REQUESTS):
                started = time.perf_counter()
                client.post(url, content=BODY).read()
                times.append(time.perf_counter() - started)
            return times

    async def timed_async() -> list[float]:
        async with httpx.AsyncClient(transport=AsyncPodHTTPTransport(), trust_env=False) as client:
            for _ in range(100):
                await (await client.post(url, content=BODY)).aread()
            times = []
            for _ in range(REQUESTS):
                started = time.perf_counter()
                await (await client.post(url, content=BODY)).aread()
                times.append(time.perf_counter() - started)
            return times

    import langchain_k8s_client

    return {
        "sync request, us": 1e6 * statistics.median(timed_sync()),
        "async request, us": 1e6 * statistics.median(asyncio.run(timed_async())),
        "from": str(Path(langchain_k8s_client.__file__).resolve()),
    }


def run_side(checkout: Path, url: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(checkout / d) for d in ("client", "api"))}
    answer = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_http11", "--worker", url],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    measured = dict(json.loads(answer.stdout.strip().splitlines()[-1]))
    loaded = Path(str(measured.pop("from")))
    if not loaded.is_relative_to(checkout):
        raise RuntimeError(f"the side {checkout} ran the client from {loaded}")
    return measured


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", help="another checkout, run beside this one")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker)))
        return
    from benchmarks.results import Record

    sides = {"after": ROOT} | ({"before": Path(args.before).resolve()} if args.before else {})
    before = ""
    if args.before:
        before = subprocess.run(
            ["git", "-C", args.before, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    record = Record.start("bench_http11", args.rounds, requests=REQUESTS, before_commit=before)
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=serve, args=(listener,), daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/execute"
    try:
        for r in range(args.rounds):
            for side, checkout in list(sides.items())[:: 1 if r % 2 else -1]:
                for row, value in run_side(checkout, url).items():
                    record.sample(row, side, value)
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    finally:
        listener.close()
    medians = record.medians()
    ratios = {}
    print(f"{'':>20} {'after':>9} {'before':>9} {'ratio':>6}")
    for row, cols in medians.items():
        earlier = cols.get("before")
        ratio = cols["after"] / earlier if earlier else float("nan")
        if earlier:
            ratios[f"after / before, {row}"] = round(ratio, 3)
        print(f"{row:>20} {cols['after']:>9.1f} {earlier or float('nan'):>9.1f} {ratio:>6.2f}")
    print(f"written: {record.finish('us', medians, ratios)}")


if __name__ == "__main__":
    main()
