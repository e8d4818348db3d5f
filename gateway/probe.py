"""A minimal MCP client the gateway uses itself: health probes, discovery refresh and idle cleanup."""

from __future__ import annotations

import json
from typing import Any

from gateway.errors import BadUpstream
from gateway.http import Pool, Response, Timeouts
from gateway.upstream import Replica, open_stream, sse_events

PROBE_VERSION = "2025-11-25"
CLIENT_INFO = {"name": "toolfleet-gateway", "version": "0.1.0"}


class ProbeSession:
    """One upstream MCP session opened by the gateway (initialize handshake, then requests)."""

    def __init__(
        self, client: Pool, replica: Replica, headers: dict[str, str], timeout_s: float, *, passive: bool = True
    ) -> None:
        self._client = client
        self._passive = passive
        """Its requests count toward the replica's health one by one; a health probe (False) judges once."""
        self.replica = replica
        self._headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            **headers,
        }
        self._timeout = Timeouts(connect=timeout_s, read=timeout_s)
        self._next_id = 0
        self.sid: str | None = None
        self.initialize_result: dict[str, Any] | None = None

    async def _post(self, payload: dict[str, Any]) -> Response:
        headers = dict(self._headers)
        if self.sid:
            headers["mcp-session-id"] = self.sid
        body = json.dumps(payload).encode()
        return await open_stream(
            self._client, self.replica, "POST", headers, body, http_timeout=self._timeout, passive=self._passive
        )

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        rid = self._next_id
        response = await self._post({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        try:
            if method == "initialize" and (sid := response.headers.get("mcp-session-id")):
                self.sid = sid
            answer = await _answer(response, rid)
        finally:
            await response.aclose()
        if "error" in answer:
            raise BadUpstream(f"{method} failed upstream: {answer['error'].get('message', '?')}")
        result = answer.get("result")
        if not isinstance(result, dict):
            raise BadUpstream(f"{method}: upstream result is not an object")
        return result

    async def notify(self, method: str) -> None:
        response = await self._post({"jsonrpc": "2.0", "method": method})
        await response.aclose()

    async def open(self, version: str = PROBE_VERSION) -> dict[str, Any]:
        self.initialize_result = await self.request(
            "initialize", {"protocolVersion": version, "capabilities": {}, "clientInfo": CLIENT_INFO}
        )
        await self.notify("notifications/initialized")
        return self.initialize_result

    async def list_tools(self) -> list[Any]:
        tools: list[Any] = []
        cursor: str | None = None
        for _ in range(100):
            result = await self.request("tools/list", {"cursor": cursor} if cursor else {})
            tools += result.get("tools") or []
            cursor = result.get("nextCursor")
            if not cursor:
                break
        return tools

    async def close(self) -> None:
        if self.sid:
            headers = {k: v for k, v in self._headers.items() if k != "content-type"} | {"mcp-session-id": self.sid}
            response = await open_stream(
                self._client, self.replica, "DELETE", headers, http_timeout=self._timeout, passive=self._passive
            )
            await response.aclose()
            self.sid = None


async def _answer(response: Response, rid: int) -> dict[str, Any]:
    ctype = response.headers.get("content-type", "")
    if response.status_code >= 400 and not ctype.startswith("application/json"):
        raise BadUpstream(f"upstream answered HTTP {response.status_code}")
    if ctype.startswith("application/json"):
        msg = _load(await response.aread())
        if isinstance(msg, dict):
            return msg
    elif ctype.startswith("text/event-stream"):
        async for _, data in sse_events(response):
            msg = _load(data) if data else None
            if isinstance(msg, dict) and msg.get("id") == rid and ("result" in msg or "error" in msg):
                return msg
    raise BadUpstream(f"upstream answered no JSON-RPC response (HTTP {response.status_code}, {ctype or 'no type'})")


def _load(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadUpstream("upstream answered invalid JSON") from exc
