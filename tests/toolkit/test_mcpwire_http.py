"""The kit's HTTP client reading answers from a loopback server that writes exact bytes: header whitespace, and
a body that came with its head (taken whole) or past the caller's limit."""

from __future__ import annotations

import asyncio

import pytest

from toolkit.mcpwire.http import Pool, ProtocolError, Timeouts

HEAD = b"HTTP/1.1 200 OK\r\n  Content-Type :\t application/json \r\nX-Empty:\r\ncontent-length: 12\r\n\r\n"
BODY = b'{"ok": true}'


async def _answer_with(data: bytes) -> asyncio.Server:
    """A server that reads each request head and answers with `data` in one write."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                await reader.readexactly(2)  # the body `{}`
                writer.write(data)
        except asyncio.IncompleteReadError:
            writer.close()  # the client hung up

    return await asyncio.start_server(answer, "127.0.0.1", 0)


async def test_a_body_that_came_with_its_head_is_read_whole_and_the_limit_still_holds() -> None:
    server, pool = await _answer_with(HEAD + BODY), Pool()
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/mcp"
    try:
        response = await pool.request("POST", url, {}, b"{}", Timeouts())
        assert (response.headers.get("content-type"), response.headers.get("x-empty")) == ("application/json", "")
        assert await response.aread() == BODY and response.complete
        await response.aclose()
        response = await pool.request("POST", url, {}, b"{}", Timeouts())  # on the same, reused, connection
        with pytest.raises(ProtocolError, match="exceeds 11 bytes"):
            await response.aread(limit=11)
        await response.aclose()
    finally:
        pool.close()
        server.close()
