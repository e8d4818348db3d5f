"""The least a proxy hop can cost here: a process that copies bytes between a client and one upstream.

    python -m bench.pipe --port PORT --to HOST:PORT

Each accepted connection gets its own connection to the upstream, and whatever either side writes is
written to the other at once, with no HTTP parsing, routing or logging (uvloop, asyncio protocols). It is
the baseline the gateway's added latency is read against in `bench.gateway`: any proxy in a process of its
own adds at least this (two more loopback writes and reads, one more process to wake per message), so
the part of the gateway's figure above it is what the gateway's own work costs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from typing import cast

import uvloop


class Half(asyncio.Protocol):
    """One side of a piped connection: what it receives goes to its peer's transport."""

    def __init__(self) -> None:
        self.transport: asyncio.WriteTransport | None = None
        self.peer: Half | None = None
        self.pending = bytearray()
        """What arrived before the peer's transport was connected (the client may write first)."""
        self.connecting: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.WriteTransport, transport)  # uvloop's do not subclass asyncio's ABCs

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.pending += data

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


def client_side(loop: asyncio.AbstractEventLoop, host: str, port: int) -> Half:
    """A client's half; it opens the upstream half and flushes what the client wrote meanwhile."""
    near = Half()

    async def connect() -> None:
        try:
            _, far = await loop.create_connection(Half, host, port)
        except OSError:
            if near.transport is not None:
                near.transport.close()
            return
        far.peer, near.peer = near, far
        assert far.transport is not None
        if near.transport is None or near.transport.is_closing():  # the client left while we connected
            far.transport.close()
            return
        if near.pending:
            far.transport.write(bytes(near.pending))
            near.pending.clear()

    near.connecting = loop.create_task(connect())  # held: the loop keeps only a weak reference
    return near


async def serve(port: int, host: str, upstream_port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: client_side(loop, host, upstream_port), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, required=True, help="port to listen on (127.0.0.1)")
    p.add_argument("--to", required=True, help="the upstream, HOST:PORT")
    args = p.parse_args(argv)
    host, _, port = args.to.rpartition(":")
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(serve(args.port, host, int(port)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
