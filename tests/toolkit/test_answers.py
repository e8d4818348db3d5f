"""A 2025-era streamable HTTP request is answered with one JSON body unless progress may travel with it.

The kit's server (`toolkit.server.ToolServer`, served by uvicorn on loopback) answers a `tools/call` without a
progress token as `application/json`, and one with a token as an SSE stream that carries the heartbeat's
progress notifications before the result; `initialize` and clients that accept only one content type get the
SDK's answers as before. Real clients: the `mcp` 2.x SDK (with a progress callback) and the 1.x SDK.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import pytest
from mcp.server.mcpserver import Context, MCPServer

from tests.support.asgi import serve_asgi
from tests.support.mcp1 import arun_mcp1_client
from tests.support.mcp2 import mcp_session
from toolkit.server import ToolServer
from toolkit.settings import ToolServerSettings

BOTH = "application/json, text/event-stream"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}},
}


class _State:
    async def aclose(self) -> None:
        return None


async def _new_state(_key: str) -> _State:
    return _State()


def _app() -> Any:
    mcp = MCPServer("demo")
    kit: ToolServer[_State] = ToolServer(mcp, ToolServerSettings(), _new_state, progress_interval_s=0.05)

    @mcp.tool()
    async def wait(ctx: Context, seconds: float) -> str:
        """Sleep in the caller's session, long enough for heartbeats when asked."""
        async with kit.session(ctx, "wait"):
            await anyio.sleep(seconds)
        return f"waited {seconds}"

    return kit.build_app()


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serve_asgi(_app()) as base:
        yield base


@pytest.fixture
async def session_id(url: str) -> AsyncIterator[str]:
    """An initialized MCP session (its id), opened and ended with plain HTTP."""
    async with httpx.AsyncClient(headers={"accept": BOTH}) as http:
        opened = await http.post(f"{url}/mcp", json=INITIALIZE)
        assert opened.headers["content-type"].startswith("text/event-stream")  # initialize keeps the SDK's SSE
        sid = opened.headers["mcp-session-id"]
        headers = {"mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
        ack = await http.post(
            f"{url}/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
        )
        assert ack.status_code == 202
        yield sid
        await http.delete(f"{url}/mcp", headers=headers)


def _call(arguments: dict[str, Any], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "wait", "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


async def _post(url: str, sid: str, body: dict[str, Any], accept: str = BOTH) -> httpx.Response:
    headers = {"accept": accept, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
    async with httpx.AsyncClient() as http:
        return await http.post(f"{url}/mcp", json=body, headers=headers)


async def test_a_call_without_a_progress_token_is_answered_with_one_json_body(url: str, session_id: str) -> None:
    answer = await _post(url, session_id, _call({"seconds": 0}))
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.headers["mcp-session-id"] == session_id
    body = answer.json()
    assert body["id"] == 7 and body["result"]["content"][0]["text"] == "waited 0.0"


async def test_a_call_with_a_progress_token_streams_heartbeats_before_its_answer(url: str, session_id: str) -> None:
    answer = await _post(url, session_id, _call({"seconds": 0.4}, {"progressToken": "tok-1"}))
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = [
        json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:") and line[5:].strip()
    ]
    progress = [e for e in events if e.get("method") == "notifications/progress"]
    assert progress and all(e["params"]["progressToken"] == "tok-1" for e in progress)
    assert events[-1]["id"] == 7 and events[-1]["result"]["content"][0]["text"] == "waited 0.4"


async def test_a_client_that_accepts_only_json_is_refused_as_before(url: str, session_id: str) -> None:
    answer = await _post(url, session_id, _call({"seconds": 0}), accept="application/json")
    assert answer.status_code == 406


async def test_the_sdk_client_gets_its_progress_and_both_kinds_of_answer(url: str) -> None:
    seen: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    async with mcp_session(url, "streamable-http", {"x-session-id": uuid.uuid4().hex}) as session:
        quick = await session.call_tool("wait", {"seconds": 0})
        slow = await session.call_tool("wait", {"seconds": 0.4}, progress_callback=on_progress)
    assert quick.content[0].text == "waited 0.0"  # type: ignore[union-attr]
    assert slow.content[0].text == "waited 0.4"  # type: ignore[union-attr]
    assert seen and all(m is not None and m.startswith("still running") for m in seen)


async def test_an_mcp_1x_client_reads_the_json_answers(url: str) -> None:
    ops = [{"op": "call_tool", "name": "wait", "arguments": {"seconds": 0}} for _ in range(2)]
    out = await arun_mcp1_client(f"{url}/mcp", ops)
    assert [r["result"]["content"][0]["text"] for r in out["results"]] == ["waited 0.0", "waited 0.0"]
