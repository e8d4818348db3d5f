"""Malformed input gets a precise error (JSON-RPC error or HTTP 4xx with a message) and the gateway keeps serving."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.gateway import ACCEPT, INIT, GatewayProc, call_text, connect


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "code", "words"),
    [
        ("/fixture/mcp", b"{not json", {}, 400, -32700, "not valid JSON"),
        ("/fixture/mcp", b"[]", {}, 400, -32600, "batches"),
        ("/fixture/mcp", b'{"id": 1, "method": "ping"}', {}, 400, -32600, "JSON-RPC 2.0"),
        ("/fixture/mcp", b'{"jsonrpc": "2.0", "id": {}, "method": "ping"}', {}, 400, -32600, '"id"'),
        ("/fixture/mcp", b'{"jsonrpc": "2.0", "id": 1, "method": 5}', {}, 400, -32600, '"method"'),
        (
            "/fixture/mcp",
            b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": 3}',
            {},
            400,
            -32600,
            "params",
        ),
        ("/nowhere/mcp", json.dumps(INIT).encode(), {}, 404, -32601, "unknown namespace 'nowhere'"),
        ("/nowhere/sse", b"", {}, 404, -32601, "unknown namespace"),
        (
            "/fixture/mcp",
            b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}',
            {"mcp-session-id": "nope"},
            404,
            -32001,
            "unknown MCP session 'nope'",
        ),
        (
            "/fixture/messages/?session_id=nope",
            b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}',
            {},
            404,
            -32001,
            "unknown SSE session",
        ),
        (
            "/fixture/mcp",
            json.dumps(INIT).encode(),
            {"x-session-id": "bad id with spaces"},
            400,
            -32600,
            "x-session-id",
        ),
        ("/fixture/mcp", b"x" * (5 * 1024 * 1024), {}, 413, -32600, "exceeds"),
        ("/unknown/path/here", b"{}", {}, 404, -32601, "no route"),
    ],
)
def test_bad_requests_get_precise_errors(
    gateway: GatewayProc, path: str, body: bytes, headers: dict[str, str], status: int, code: int, words: str
) -> None:
    method = "GET" if path.endswith("/sse") else "POST"
    response = httpx.request(
        method, gateway.base + path, content=body or None, headers={**ACCEPT, **headers}, trust_env=False, timeout=10
    )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and words in error["message"], error


def test_wrong_http_methods_are_refused(gateway: GatewayProc) -> None:
    assert httpx.put(gateway.url("fixture"), trust_env=False).status_code == 405
    assert httpx.post(gateway.url("fixture", "sse"), trust_env=False).status_code == 405
    assert httpx.get(gateway.base + "/fixture/messages/?session_id=x", trust_env=False).status_code == 405


async def test_the_gateway_keeps_serving_after_bad_input(gateway: GatewayProc, transport: str) -> None:
    async with httpx.AsyncClient(trust_env=False) as http:
        junk = await http.post(gateway.url("fixture"), content=b"\xff\xfe garbage", headers=ACCEPT)
    assert junk.status_code == 400
    async with connect(gateway.url("fixture", transport), transport) as client:
        assert await call_text(client, "echo", {"text": "ok"}) == "ok"
        # a bad call inside a good session is the upstream's to answer, and it answers precisely
        result = await client.call_tool("add", {"a": "not a number"})
        assert result.is_error
