"""JSON-RPC over streamable HTTP: one MCP session's requests, and their answers read as JSON or as SSE.

The transport is a seam of one method (`Send`), as httpx's is: the gateway's probes send through a replica's
health accounting (`gateway.upstream.open_stream`), the orchestrator's client through its pool at the address
its policy checked. The era's own stamps (`_meta`, `Mcp-*` headers) are the caller's: this module knows only
JSON-RPC, the `Mcp-Session-Id` an `initialize` answer names, and the `DELETE` that ends that session.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from toolkit.mcpwire import sse
from toolkit.mcpwire.http import Response

Send = Callable[[str, dict[str, str], bytes | None], Awaitable[Response]]
"""(HTTP method, headers, body) -> the response, its body not yet read."""
OnMessage = Callable[[dict[str, Any]], Awaitable[None]]
"""What to do with a message a stream carries before its answer (a notification, or the server's request)."""

SESSION_ID = "mcp-session-id"
HANDSHAKE_VERSION = "2025-11-25"


class WireError(Exception):
    """The server's answer is not a JSON-RPC answer (an HTTP error, garbage, a stream that ended unanswered)."""


class RpcError(Exception):
    """The server answered a JSON-RPC error; `str()` is its message."""

    def __init__(self, method: str, error: dict[str, Any]) -> None:
        self.method = method
        self.code = error.get("code")
        self.message = str(error.get("message", "?"))
        self.data = error.get("data")
        super().__init__(self.message)


class WireSession:
    """One MCP session: requests numbered from 1, the session id kept once `initialize` names one."""

    def __init__(self, send: Send, headers: dict[str, str]) -> None:
        self._send = send
        self.headers = {"accept": "application/json, text/event-stream", "content-type": "application/json", **headers}
        self._next_id = 0
        self.sid: str | None = None
        self.initialize_result: dict[str, Any] | None = None
        self.on_message: OnMessage | None = None
        """Told every message a stream carries before its answer; None: they are skipped."""

    def next_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def post(self, payload: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
        """POST one message with the session's headers (and its id, once it has one), `headers` on top."""
        sent = {**self.headers, **headers} if headers else dict(self.headers)
        if self.sid:
            sent[SESSION_ID] = self.sid
        return await self._send("POST", sent, json.dumps(payload).encode())

    async def request(
        self, method: str, params: dict[str, Any] | None = None, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """One request and its `result`; a JSON-RPC error raises `RpcError`, anything else `WireError`."""
        rid = self.next_id()
        response = await self.post({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}}, headers)
        try:
            if method == "initialize" and (sid := response.headers.get(SESSION_ID)):
                self.sid = sid
            return await self.answer(method, response, rid)
        finally:
            await response.aclose()

    async def answer(self, method: str, response: Response, rid: int) -> dict[str, Any]:
        """The result that answers request `rid` in `response` (JSON, or the event of a stream that carries it)."""
        answer = await self._answer(response, rid)
        if "error" in answer:
            error = answer["error"]
            raise RpcError(method, error if isinstance(error, dict) else {"message": str(error)})
        result = answer.get("result")
        if not isinstance(result, dict):
            raise WireError(f"{method}: upstream result is not an object")
        return result

    async def _answer(self, response: Response, rid: int) -> dict[str, Any]:
        ctype = response.headers.get("content-type", "")
        if response.status_code >= 400 and not ctype.startswith("application/json"):
            raise WireError(f"upstream answered HTTP {response.status_code}")
        if ctype.startswith("application/json"):
            msg = _load(await response.aread())
            if isinstance(msg, dict):
                return msg
        elif ctype.startswith("text/event-stream"):
            async for _, data in sse.events(response):
                msg = _load(data) if data else None
                if not isinstance(msg, dict):
                    continue
                if msg.get("id") == rid and ("result" in msg or "error" in msg):
                    return msg
                if self.on_message is not None:
                    await self.on_message(msg)
        raise WireError(f"upstream answered no JSON-RPC response (HTTP {response.status_code}, {ctype or 'no type'})")

    async def notify(self, method: str, headers: dict[str, str] | None = None) -> None:
        response = await self.post({"jsonrpc": "2.0", "method": method}, headers)
        await response.aclose()

    async def reply(self, message: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        """Send the answer to a request of the server's (a JSON-RPC response with its id)."""
        response = await self.post({"jsonrpc": "2.0", **message}, headers)
        await response.aclose()

    async def open(self, version: str, client_info: dict[str, str]) -> dict[str, Any]:
        """The 2025-era handshake: `initialize` (which names the session), then `notifications/initialized`."""
        self.sid = None
        self.initialize_result = await self.request(
            "initialize", {"protocolVersion": version, "capabilities": {}, "clientInfo": client_info}
        )
        await self.notify("notifications/initialized")
        return self.initialize_result

    async def list_tools(self, headers: dict[str, str] | None = None, meta: dict[str, Any] | None = None) -> list[Any]:
        """Every page of `tools/list`; `meta`: the `_meta` each request carries (the 2026-07-28 stamp)."""
        tools: list[Any] = []
        cursor: str | None = None
        for _ in range(100):
            params: dict[str, Any] = {"cursor": cursor} if cursor else {}
            if meta is not None:
                params["_meta"] = meta
            result = await self.request("tools/list", params, headers)
            tools += result.get("tools") or []
            cursor = result.get("nextCursor")
            if not cursor:
                break
        return tools

    async def close(self) -> None:
        """End the session the server named (`DELETE`); a session without an id has nothing to end."""
        if self.sid:
            headers = {k: v for k, v in self.headers.items() if k != "content-type"} | {SESSION_ID: self.sid}
            self.sid = None
            response = await self._send("DELETE", headers, None)
            await response.aclose()


def _load(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, an integer past 4300 digits; too deep
        raise WireError("upstream answered invalid JSON") from exc
