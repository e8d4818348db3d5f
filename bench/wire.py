"""A lean MCP client for benches: the kit's wire (`toolkit.mcpwire`), the same code the gateway's pool runs.

A tool server's calls arrive from the gateway's connection pool, not from an SDK client session. The `mcp`
SDK's client spends about 1 ms of CPU per call on this machine (its streams, tasks and pydantic models), as
much as the server it measures, so a bench that wants the server's floor times it through this client too,
beside the SDK's row. It speaks the 2025-era streamable HTTP the gateway speaks: `initialize` (answered as SSE
or JSON), `notifications/initialized`, then `tools/call` with the session's headers, on one keep-alive
connection of the kit's pool.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from tests.support.mcp2 import mcp_session
from toolkit.mcpwire.http import Pool, Response, Timeouts
from toolkit.mcpwire.session import HANDSHAKE_VERSION, WireSession

TIMEOUTS = Timeouts(connect=5.0, read=120.0)


@dataclass(frozen=True)
class Answer:
    """What a bench reads of a `tools/call` result."""

    is_error: bool
    structured_content: dict[str, Any] | None
    text: str


class LeanSession:
    """An initialized MCP session; `call_tool` mirrors the SDK session's method."""

    def __init__(self, wire: WireSession) -> None:
        self._wire = wire

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Answer:
        result = await self._wire.request("tools/call", {"name": name, "arguments": arguments})
        text = "".join(block.get("text", "") for block in result.get("content", []))
        return Answer(bool(result.get("isError")), result.get("structuredContent"), text)


@contextlib.asynccontextmanager
async def wire_session(base_url: str, headers: dict[str, str] | None = None) -> AsyncIterator[LeanSession]:
    """An initialized session at `{base_url}/mcp` (the SDK's `mcp_session` for benches, without the SDK)."""
    url = f"{base_url.rstrip('/')}/mcp"
    pool = Pool(max_idle=1, idle_s=3600)

    async def send(method: str, sent: dict[str, str], body: bytes | None) -> Response:
        return await pool.request(method, url, sent, body, TIMEOUTS)

    wire = WireSession(send, headers or {})
    try:
        opened = await wire.open(HANDSHAKE_VERSION, {"name": "bench-wire", "version": "1"})
        wire.headers["mcp-protocol-version"] = str(opened.get("protocolVersion") or HANDSHAKE_VERSION)
        yield LeanSession(wire)
        await wire.close()  # the server's session ends here, not at its idle timeout
    finally:
        pool.close()


CLIENTS = ("sdk", "wire")
"""The clients a bench times a server through: the `mcp` 2.x SDK's session, and this module's."""


def client_session(kind: str, base_url: str, headers: dict[str, str]) -> AbstractAsyncContextManager[Any]:
    """An initialized session of `kind` (one of `CLIENTS`) at `{base_url}/mcp`; both have `call_tool`."""
    return mcp_session(base_url, "streamable-http", headers) if kind == "sdk" else wire_session(base_url, headers)


def answer_of(result: Any) -> Answer:
    """What a bench reads of either client's `tools/call` result (an SDK `CallToolResult`, or an `Answer`)."""
    if isinstance(result, Answer):
        return result
    text = "".join(getattr(block, "text", "") for block in result.content)
    return Answer(result.is_error, result.structured_content, text)
