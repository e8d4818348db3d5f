"""An `mcp` 2.x client session over either transport, for tests that should not care which."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

TRANSPORTS = ("streamable-http", "sse")


@contextlib.asynccontextmanager
async def mcp_session(
    base_url: str, transport: str, headers: dict[str, str] | None = None, *, timeout_s: float = 60
) -> AsyncIterator[ClientSession]:
    """An initialized session at `{base_url}/mcp` or `{base_url}/sse`."""
    if transport == "sse":
        streams_cm = sse_client(f"{base_url}/sse", headers=headers, timeout=timeout_s, sse_read_timeout=timeout_s)
    else:
        client = create_mcp_http_client(headers=headers)
        streams_cm = streamable_http_client(f"{base_url}/mcp", http_client=client)
    async with streams_cm as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        yield session
