"""What `Connection: close` on every admission review costs: a new TLS connection per review.

The operator's webhook answers every review with `Connection: close` (admission/server.py: a stopping
replica must not close a pooled connection under the API server's next POST). This times reviews sent
the way the API server sends them, one after another, against the same allow-everything handler served two
ways in one process: kopf's server (keep-alive, one connection reused) and ours (a handshake per review).
Rounds interleaved; prints the median per review for each side and the ratio. No cluster needed.
Run: `.venv/bin/python -m benchmarks.bench_webhook_connection --rounds 9 --reviews 200`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import socket
import ssl
import statistics
import time
from collections.abc import AsyncGenerator
from typing import Any, cast

import kopf

from agentsession_operator.admission import server as webhook_server

REVIEW = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u"}}'


async def allow(request: Any, **_: Any) -> Any:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"allowed": True}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reviews(port: int, ca: str, count: int) -> float:
    """Seconds per review, `count` sent in a row over a client that reuses its connection when allowed."""
    context = ssl.create_default_context(cadata=ca)
    context.check_hostname = False
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    started = time.perf_counter()
    for _ in range(count):
        connection.request("POST", "/policy", body=REVIEW, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        if response.getheader("Connection") == "close":
            connection.close()  # http.client reconnects on the next request, as Go's transport does
    took = time.perf_counter() - started
    connection.close()
    return took / count


async def serve(server: kopf.WebhookServer) -> tuple[AsyncGenerator[Any, None], str]:
    stream = cast(AsyncGenerator[Any, None], server(allow))
    config = await anext(stream)
    return stream, base64.b64decode(config["caBundle"]).decode()


async def main(rounds: int, count: int) -> None:
    ours_port, kopfs_port = free_port(), free_port()
    ours = webhook_server.build_server(webhook_server.WebhookConfig(port=ours_port, bind="127.0.0.1"))
    assert isinstance(ours, webhook_server.PublishingWebhookServer)
    kopfs = kopf.WebhookServer(
        addr="127.0.0.1", port=kopfs_port, certfile=ours.certfile, pkeyfile=ours.pkeyfile, cafile=ours.cafile
    )
    ours_stream, ca = await serve(ours)
    kopfs_stream, kopfs_ca = await serve(kopfs)
    sides: dict[str, list[float]] = {"keep-alive (kopf)": [], "Connection: close (ours)": []}
    try:
        for i in range(rounds):
            order = [("keep-alive (kopf)", kopfs_port, kopfs_ca), ("Connection: close (ours)", ours_port, ca)]
            for name, port, bundle in order if i % 2 == 0 else reversed(order):
                sides[name].append(await asyncio.to_thread(reviews, port, bundle, count))
    finally:
        await ours_stream.aclose()
        await kopfs_stream.aclose()
    medians = {name: statistics.median(values) * 1000 for name, values in sides.items()}
    print(f"{rounds} rounds x {count} reviews, interleaved; ms per review (median of rounds)")
    print(f"{'server':<28}{'median':>10}{'min':>10}{'max':>10}")
    for name, values in sides.items():
        ms = [v * 1000 for v in values]
        print(f"{name:<28}{medians[name]:>10.2f}{min(ms):>10.2f}{max(ms):>10.2f}")
    keep, close = medians["keep-alive (kopf)"], medians["Connection: close (ours)"]
    print(f"close / keep-alive: {close / keep:.2f}x (+{close - keep:.2f} ms per review)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--reviews", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.reviews))
