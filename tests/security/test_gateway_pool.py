"""Issue 40 (the gateway's side): the upstream pool never writes on a connection its upstream may be closing.

uvicorn closes a keep-alive connection idle for 5 s; a request written on it as it closes fails. The pool closes
a connection idle past `pool.idle_s` (4 s by default) instead of reusing it, and sends a request that a reused
connection ended without a byte of answer once more, on a new connection, and only once. Against a real fixture
MCP server, and a loopback server that closes reused connections on purpose.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Iterator

import pytest
import uvicorn

from gateway.config import GatewayConfig
from tests.support.gateway import Upstream, fixtures
from toolkit.mcpwire.http import ClosedUnanswered, Pool, Timeouts


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with fixtures("r1") as ups:
        yield ups[0]


def test_the_default_idle_expiry_is_below_uvicorns_keep_alive() -> None:
    assert GatewayConfig().pool.idle_s < uvicorn.Config(app=None).timeout_keep_alive


async def test_a_connection_idle_past_its_expiry_is_closed_not_reused(upstream: Upstream) -> None:
    pool = Pool(idle_s=0.3)
    healthz = upstream.url.removesuffix("/mcp") + "/healthz"

    async def local_port() -> int:
        response = await pool.request("GET", healthz, {}, None, Timeouts())
        await response.aread()
        port = response._conn.writer.get_extra_info("sockname")[1]
        await response.aclose()
        return port

    try:
        first = await local_port()
        assert await local_port() == first  # reused while fresh
        await asyncio.sleep(0.5)
        assert await local_port() != first  # past idle_s: a new connection
    finally:
        pool.close()


class ClosingServer:
    """Answers the first request of each connection, then closes it on reading the next one, unanswered: an
    upstream closing an idle keep-alive connection just as the client writes on it."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.server: asyncio.Server | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        first = True
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
                await reader.readexactly(int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0]))
            except asyncio.IncompleteReadError:
                break
            self.requests += 1
            if not first:
                break
            first = False
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
        writer.close()

    async def url(self) -> str:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/mcp"


async def post(pool: Pool, url: str) -> bytes:
    response = await pool.request("POST", url, {"content-type": "application/json"}, b"{}", Timeouts())
    try:
        return await response.aread()
    finally:
        await response.aclose()


async def test_a_request_a_reused_connection_ends_unanswered_is_sent_once_more_on_a_new_one() -> None:
    server, pool = ClosingServer(), Pool()
    url = await server.url()
    try:
        assert await asyncio.gather(post(pool, url), post(pool, url)) == [b"ok", b"ok"]  # two idle connections
        assert await post(pool, url) == b"ok"
        # the third request: once on an idle connection (closed unanswered), once on a new one; not on the other idle
        assert (server.requests, server.connections) == (4, 3)
    finally:
        pool.close()
        assert server.server is not None
        server.server.close()


@pytest.mark.parametrize("reset", [False, True])
async def test_a_new_connection_ended_unanswered_is_not_retried(reset: bool) -> None:
    """The upstream may have run it: a request is sent again only where it cannot have been read (see above).
    A reset (a stopping server's answer to what it accepted and did not read) is told apart from a close."""
    seen = 0

    async def unanswered(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal seen
        await reader.readuntil(b"\r\n\r\n")
        seen += 1
        if reset:  # SO_LINGER 0: close sends RST
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()

    server, pool = await asyncio.start_server(unanswered, "127.0.0.1", 0), Pool()
    try:
        with pytest.raises(ClosedUnanswered) as raised:
            await post(pool, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/mcp")
        assert seen == 1 and raised.value.reset is reset
    finally:
        pool.close()
        server.close()
