"""`python -m devcluster.realnode.forward`: expose host-loopback services inside the node's network namespace.

The real node (kubelet, containerd, pods) lives in a network namespace the cluster creates, while the API
server and the image registry listen on the host's 127.0.0.1 only. This process opens each listening socket
*inside* the node's namespace (setns, socket, setns back) and connects to its target from the host's
namespace, so nothing ever listens on a non-loopback host address and pods reach the API server as they
would in a cluster (through the `kubernetes` Service, whose endpoint is a listener here).

    python -m devcluster.realnode.forward --netns NAME --map 198.19.255.2:6443=127.0.0.1:6443 ...
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class Mapping:
    listen_host: str
    listen_port: int
    target_host: str
    target_port: int

    @classmethod
    def parse(cls, text: str) -> Mapping:
        """`LISTEN_HOST:PORT=TARGET_HOST:PORT`."""
        listen, _, target = text.partition("=")
        lhost, _, lport = listen.rpartition(":")
        thost, _, tport = target.rpartition(":")
        if not (lhost and lport.isdigit() and thost and tport.isdigit()):
            raise argparse.ArgumentTypeError(f"expected LISTEN_HOST:PORT=TARGET_HOST:PORT, got {text!r}")
        return cls(lhost, int(lport), thost, int(tport))


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextmanager
def inside(netns: str) -> Iterator[None]:
    """Run the block in network namespace `netns` (/run/netns/NAME), then return to this one."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


def listen_inside(netns: str, host: str, port: int) -> socket.socket:
    with inside(netns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(512)
        sock.setblocking(False)
    return sock


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        if writer.can_write_eof():
            try:
                writer.write_eof()
            except OSError:
                writer.close()
        else:
            writer.close()


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _handler(mapping: Mapping) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            # Created after setns back: this socket belongs to the host's namespace (its loopback).
            up_reader, up_writer = await asyncio.open_connection(mapping.target_host, mapping.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        for w in (writer, up_writer):
            w.close()

    return handle


async def serve(netns: str, mappings: list[Mapping], ready_file: str | None) -> None:
    servers = []
    for m in mappings:
        sock = listen_inside(netns, m.listen_host, m.listen_port)
        servers.append(await asyncio.start_server(_handler(m), sock=sock))
    if ready_file:
        with open(ready_file, "w") as f:
            f.write("ready\n")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for server in servers:
        server.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--netns", required=True)
    parser.add_argument("--map", dest="mappings", type=Mapping.parse, action="append", required=True)
    parser.add_argument("--ready-file")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.netns, args.mappings, args.ready_file))


if __name__ == "__main__":
    main()
