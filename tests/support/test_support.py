"""Checks of the test-support helpers: the MCP 1.x client venv, and (slow) the vLLM CPU worker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mcp.server.mcpserver import Context, MCPServer

from .asgi import free_port, serve_asgi
from .mcp1 import arun_mcp1_client, mcp1_version, run_mcp1_client


def _trivial_server() -> MCPServer:
    server = MCPServer("trivial", instructions="A trivial server for the helpers' own tests.")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def header(name: str, ctx: Context) -> str:
        """The value of one request header (to check that --header reaches the server)."""
        request = ctx.request_context.request
        return (getattr(request, "headers", None) or {}).get(name, "<missing>")

    @server.tool()
    async def slow(ctx: Context) -> str:
        """Reports progress twice."""
        await ctx.report_progress(1, 2, "half")
        await ctx.report_progress(2, 2, "done")
        return "finished"

    return server


@pytest.fixture(scope="module")
def mcp_urls() -> Iterator[dict[str, str]]:
    server = _trivial_server()
    with serve_asgi(server.sse_app()) as sse_base, serve_asgi(server.streamable_http_app()) as http_base:
        yield {"sse": f"{sse_base}/sse", "streamable-http": f"{http_base}/mcp"}


def test_mcp1_venv_is_a_1x_sdk() -> None:
    assert mcp1_version().startswith("1.")


@pytest.mark.parametrize("transport", ["sse", "streamable-http"])
def test_mcp1_client_against_mcpserver(mcp_urls: dict[str, str], transport: str) -> None:
    ops = [
        {"op": "list_tools"},
        {"op": "call_tool", "name": "add", "arguments": {"a": 2, "b": 40}},
        ["call_tool", "header", {"name": "x-session-id"}],
        ["call_tool", "slow", {}],
        ["call_tool", "add", {"a": "not a number"}],
        ["call_tool", "no_such_tool", {}],
        "ping",
    ]
    out = run_mcp1_client(mcp_urls[transport], ops, transport=transport, headers={"x-session-id": "resp_123"})
    assert out["server_info"]["name"] == "trivial"
    assert out["instructions"].startswith("A trivial server")
    listed, added, header, slow, bad_args, missing, ping = out["results"]
    assert {t["name"] for t in listed["tools"]} == {"add", "header", "slow"}
    assert added["ok"] and added["result"]["content"][0]["text"] == "42"
    assert header["result"]["content"][0]["text"] == "resp_123"
    assert slow["result"]["content"][0]["text"] == "finished"
    assert [p["progress"] for p in slow["progress"]] == [1, 2]
    # A tool error is a result with isError (or a JSON-RPC error); either way the session goes on.
    assert bad_args["result"]["isError"] if bad_args["ok"] else bad_args["error"]["message"]
    assert missing["result"]["isError"] if missing["ok"] else missing["error"]["message"]
    assert ping["ok"]
    if transport == "streamable-http":
        assert out["session_id"]


async def test_mcp1_client_async_and_connection_error(mcp_urls: dict[str, str]) -> None:
    out = await arun_mcp1_client(mcp_urls["streamable-http"], [["call_tool", "add", {"a": 1, "b": 1}]])
    assert out["results"][0]["result"]["content"][0]["text"] == "2"
    closed = f"http://127.0.0.1:{free_port()}/mcp"
    failed = run_mcp1_client(closed, ["list_tools"], timeout=5, check=False)
    assert failed["error"]["message"] and failed["results"] == []


@pytest.mark.slow
def test_vllm_cpu_worker_streams_token_ids() -> None:
    from .vllm import HELLO_PROMPT, STOP_TOKEN_IDS, process_group_alive, stream_completion, vllm_server

    with vllm_server() as server:
        assert server.rss() > 0
        chunks = stream_completion(
            server.base_url,
            server.model,
            HELLO_PROMPT,
            max_tokens=32,
            seed=0,
            stop_token_ids=list(STOP_TOKEN_IDS),
            stream_options={"include_usage": True},
        )
        choices = [c["choices"][0] for c in chunks if c.get("choices")]
        assert choices[0]["prompt_token_ids"] == HELLO_PROMPT
        ids = [i for c in choices for i in c.get("token_ids") or []]
        assert ids and all(isinstance(i, int) for i in ids)
        assert choices[-1]["finish_reason"] in ("stop", "length")
        assert chunks[-1]["usage"]["completion_tokens"] == len(ids)
    assert server.proc.returncode is not None  # stopped and reaped
    assert not process_group_alive(server.proc.pid)  # engine core and workers too
