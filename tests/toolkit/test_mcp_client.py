"""The kit's lean MCP client against a real `mcp` SDK server: both eras, re-open, `input_required`, pinning.

One SDK server (SSE answers, as the SDK serves by default) behind a recording front on loopback: `/mcp`
passes everything through, `/old/mcp` answers a 2026-07-28 request the way a 2025-only server does (HTTP
400, a JSON-RPC error), so the client's fallback to `initialize` meets a real server too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

from tests.support.asgi import serve_asgi
from toolkit.mcpwire.client import MODERN, InputUnavailable, McpClient
from toolkit.mcpwire.http import Pool, Timeouts
from toolkit.mcpwire.session import WireError, _load

TIMEOUTS = Timeouts(connect=5.0, read=30.0)


def _server() -> MCPServer:
    mcp = MCPServer("lean-test", instructions="Tools for the lean client's test.")

    @mcp.tool()
    async def echo(text: str, ctx: Context) -> str:
        await ctx.info(f"echoing {text}")  # a notification on the stream before the answer
        return f"echo: {text}"

    @mcp.tool()
    async def patient(ctx: Context) -> str | InputRequiredResult:
        if ctx.request_state is None:
            return InputRequiredResult(request_state="round-1")
        return f"resumed from {ctx.request_state}"

    @mcp.tool()
    async def curious(ctx: Context) -> str | InputRequiredResult:
        ask = ElicitRequest(
            params=ElicitRequestFormParams(message="name?", requested_schema={"type": "object", "properties": {}})
        )
        return InputRequiredResult(input_requests={"name": ask})

    return mcp


@dataclass
class Front:
    """Records each request (method, path, headers, JSON body); `/old/...` refuses the 2026-07-28 era."""

    app: Any
    seen: list[dict[str, Any]] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        record = {"method": scope["method"], "path": scope["path"], "headers": headers, "body": body}
        self.seen.append(record)
        old = scope["path"].startswith("/old/")
        if old and headers.get("mcp-protocol-version") == MODERN:
            error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Bad Request: no session"}}
            await send(
                {"type": "http.response.start", "status": 400, "headers": [(b"content-type", b"application/json")]}
            )
            return await send({"type": "http.response.body", "body": json.dumps(error).encode()})
        path = scope["path"].removeprefix("/old")
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def sent(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                record["answered"] = dict(message["headers"]).get(b"content-type", b"").decode()
                record["status"] = message["status"]
            await send(message)

        await self.app({**scope, "path": path, "raw_path": path.encode()}, replay, sent)

    def calls(self, path: str) -> list[dict[str, Any]]:
        """The JSON-RPC requests sent to `path`, with their headers."""
        out = []
        for r in self.seen:
            if r["path"] == path and r["body"]:
                out.append(
                    {
                        **json.loads(r["body"]),
                        "headers": r["headers"],
                        "verb": r["method"],
                        "answered": r.get("answered"),
                    }
                )
            elif r["path"] == path:
                out.append({"verb": r["method"], "headers": r["headers"], "status": r.get("status")})
        return out


pytestmark = pytest.mark.filterwarnings("ignore:The logging capability is deprecated")


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Front]]:
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    front = Front(_server().streamable_http_app(transport_security=security))
    with serve_asgi(front) as url:
        yield url, front


@pytest.fixture
async def pool() -> Any:
    pool = Pool()
    yield pool
    pool.close()


async def test_a_2026_server_is_called_sessionless_with_each_request_stamped(served, pool) -> None:
    url, front = served
    client = McpClient(pool, f"{url}/mcp", {"x-session-id": "conv_modern"}, timeouts=TIMEOUTS)
    result = await client.call_tool("echo", {"text": "hi"})
    await client.aclose()
    assert client.version == MODERN and client.server_name == "lean-test"
    assert client.instructions == "Tools for the lean client's test."
    assert result["content"][0]["text"] == "echo: hi" and not result["isError"]
    sent = [c for c in front.calls("/mcp") if c["headers"].get("x-session-id") == "conv_modern"]
    assert [c.get("method") for c in sent] == ["server/discover", "tools/call"]  # no DELETE: nothing to end
    call = sent[1]
    assert call["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == MODERN
    assert call["headers"]["mcp-method"] == "tools/call" and call["headers"]["mcp-name"] == "echo"
    assert "mcp-session-id" not in call["headers"] and call["answered"] == "application/json"


async def test_a_2025_server_gets_a_session_reopened_when_it_forgets_it_and_deleted_at_the_end(served, pool) -> None:
    url, front = served
    client = McpClient(pool, f"{url}/old/mcp", {"x-session-id": "conv_old"}, timeouts=TIMEOUTS)
    first = await client.call_tool("echo", {"text": "one"})
    assert client.version is not None and client.version != MODERN and client.server_name == "lean-test"
    sid = next(c["headers"]["mcp-session-id"] for c in front.calls("/old/mcp") if c.get("method") == "tools/call")
    async with httpx.AsyncClient() as http:
        forgot = await http.delete(
            f"{url}/mcp", headers={"mcp-session-id": sid, "mcp-protocol-version": client.version}
        )
    assert forgot.status_code < 300  # the server ended the session: the client's next call meets a 404
    second = await client.call_tool("echo", {"text": "two"})
    await client.aclose()
    assert first["content"][0]["text"] == "echo: one" and second["content"][0]["text"] == "echo: two"
    sent = [c for c in front.calls("/old/mcp") if c["headers"].get("x-session-id") == "conv_old"]
    methods = [c.get("method", c["verb"]) for c in sent]
    assert methods == [
        "server/discover",  # refused as a 2025-only server refuses it
        "initialize",
        "notifications/initialized",
        "tools/call",
        "tools/call",  # 404: the session is gone
        "initialize",
        "notifications/initialized",
        "tools/call",
        "DELETE",
    ]
    assert sent[-1]["status"] == 200  # the server ended the session the client held
    new_sid = sent[-1]["headers"]["mcp-session-id"]
    assert new_sid != sid and sent[-2]["headers"]["mcp-session-id"] == new_sid
    assert sent[3]["headers"]["mcp-protocol-version"] == client.version
    assert sent[3]["answered"].startswith("text/event-stream")  # read out of a stream, past its log notification


async def test_a_state_only_input_required_is_resent_with_its_state_and_asked_input_is_refused(served, pool) -> None:
    url, front = served
    client = McpClient(pool, f"{url}/mcp", {"x-session-id": "conv_input"}, timeouts=TIMEOUTS)
    result = await client.call_tool("patient", {})
    assert result["content"][0]["text"] == "resumed from round-1"
    retried = [c for c in front.calls("/mcp") if c["headers"].get("x-session-id") == "conv_input"][-1]
    assert retried["params"]["requestState"]  # the state the server sealed, sent back as it came
    with pytest.raises(InputUnavailable, match="elicitation/create"):
        await client.call_tool("curious", {})


async def test_a_pinned_client_connects_to_the_checked_address_and_keeps_the_name_in_host(served, pool) -> None:
    url, front = served
    port = url.rsplit(":", 1)[1]
    name = f"pinned.invalid:{port}"  # a name no resolver knows: only the pin can reach the server
    client = McpClient(pool, f"http://{name}/mcp", {"x-session-id": "conv_pin"}, timeouts=TIMEOUTS, address="127.0.0.1")
    result = await client.call_tool("echo", {"text": "pinned"})
    assert result["content"][0]["text"] == "echo: pinned"
    hosts = {c["headers"]["host"] for c in front.calls("/mcp") if c["headers"].get("x-session-id") == "conv_pin"}
    assert hosts == {name}


@pytest.mark.parametrize(
    "body", [b"{not json", b"\xff\xfe", b'{"n": ' + b"9" * 5000 + b"}", b"[" * 100_000], ids=lambda b: repr(b[:12])
)
def test_a_reply_that_cannot_be_read_is_a_wire_error_not_an_escape(body: bytes) -> None:
    """Not JSON, not UTF-8, an integer past the digits Python parses, nesting past the recursion bound: each is
    the client's one `WireError`, which its callers turn into a tool error."""
    with pytest.raises(WireError, match="invalid JSON"):
        _load(body)
