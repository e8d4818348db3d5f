"""A lean MCP client for benches: one keep-alive HTTP/1.1 connection (h11), JSON-RPC bodies built by hand.

A tool server's calls arrive from the gateway's connection pool, not from an SDK client session. The `mcp`
SDK's client spends about 1 ms of CPU per call on this machine (its streams, tasks and pydantic models), as
much as the server it measures, so a bench that wants the server's floor times it through this client too,
beside the SDK's row. It speaks the 2025-era streamable HTTP the gateway speaks: `initialize` (answered as SSE
or JSON), `notifications/initialized`, then `tools/call` with the session's headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import h11

from tests.support.mcp2 import mcp_session

VERSION = "2025-11-25"


@dataclass(frozen=True)
class Answer:
    """What a bench reads of a `tools/call` result."""

    is_error: bool
    structured_content: dict[str, Any] | None
    text: str


class WireSession:
    """An initialized MCP session over one connection; `call_tool` mirrors the SDK session's method."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, path: str) -> None:
        self._reader, self._writer, self._path = reader, writer, path
        self._conn = h11.Connection(h11.CLIENT)
        self._headers = [("host", host), ("accept", "application/json, text/event-stream")]
        self._ids = itertools.count(1)

    async def _post(self, message: dict[str, Any]) -> tuple[h11.Response, bytes]:
        body = json.dumps(message).encode()
        headers = [*self._headers, ("content-type", "application/json"), ("content-length", str(len(body)))]
        out = self._conn.send(h11.Request(method="POST", target=self._path, headers=headers))
        self._writer.write(out + self._conn.send(h11.Data(data=body)) + self._conn.send(h11.EndOfMessage()))
        response: h11.Response | None = None
        chunks = bytearray()
        while True:
            event = self._conn.next_event()
            if event is h11.NEED_DATA:
                self._conn.receive_data(await self._reader.read(65536))
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                chunks.extend(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                raise ConnectionError("the server closed the connection mid-answer")
        self._conn.start_next_cycle()
        assert response is not None
        return response, bytes(chunks)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One JSON-RPC request; its `result` (a JSON-RPC error raises)."""
        response, body = await self._post({"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params})
        kind = dict(response.headers).get(b"content-type", b"")
        if kind.startswith(b"text/event-stream"):  # the answer is the last `data:` line of the stream
            body = [line[5:] for line in body.splitlines() if line.startswith(b"data:")][-1]
        answer = json.loads(body)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    async def initialize(self, headers: dict[str, str]) -> None:
        self._headers += list(headers.items())
        info = {"name": "bench-wire", "version": "1"}
        params = {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": info}
        response, _ = await self._post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
        session = dict(response.headers).get(b"mcp-session-id")
        if session is not None:
            self._headers.append(("mcp-session-id", session.decode()))
        self._headers.append(("mcp-protocol-version", VERSION))
        await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Answer:
        result = await self.request("tools/call", {"name": name, "arguments": arguments})
        text = "".join(block.get("text", "") for block in result.get("content", []))
        return Answer(bool(result.get("isError")), result.get("structuredContent"), text)


@contextlib.asynccontextmanager
async def wire_session(base_url: str, headers: dict[str, str] | None = None) -> AsyncIterator[WireSession]:
    """An initialized session at `{base_url}/mcp` (the SDK's `mcp_session` for benches, without the SDK)."""
    url = urlsplit(base_url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        session = WireSession(reader, writer, url.netloc, f"{url.path.rstrip('/')}/mcp")
        await session.initialize(headers or {})
        yield session
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


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
