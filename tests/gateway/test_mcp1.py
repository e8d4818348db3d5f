"""`mcp` 1.x clients (what vLLM and many third parties run) through the gateway on both transports."""

from __future__ import annotations

import uuid

from tests.support.gateway import GatewayProc
from tests.support.mcp1 import arun_mcp1_client

OPS = [
    {"op": "list_tools"},
    {"op": "call_tool", "name": "add", "arguments": {"a": 20, "b": 22}},
    {"op": "call_tool", "name": "progress", "arguments": {"steps": 2}},
    {"op": "call_tool", "name": "log", "arguments": {"message": "from 1.x"}},
    {"op": "call_tool", "name": "count", "arguments": {}},
    {"op": "list_resources"},
    {"op": "read_resource", "uri": "fixture://items/7"},
    {"op": "list_prompts"},
    {"op": "get_prompt", "name": "review", "arguments": {"code": "y = 2"}},
    {"op": "ping"},
    {"op": "call_tool", "name": "cleanup_session", "arguments": {}},
]


async def test_an_mcp1_client_uses_every_feature_through_the_gateway(gateway: GatewayProc, transport: str) -> None:
    sid = f"resp_{uuid.uuid4().hex[:8]}"
    out = await arun_mcp1_client(
        gateway.url("fixture", transport), OPS, transport=transport, headers={"x-session-id": sid}
    )
    assert out["server_info"]["name"] == "fixture"
    assert out["instructions"].startswith("Fixture server")
    results = out["results"]
    assert all(r["ok"] for r in results), results
    tools, add, progress, log, count, resources, item, prompts, prompt, _, cleanup = results
    assert {t["name"] for t in tools["tools"]} >= {"echo", "add", "cleanup_session"}
    assert add["result"]["content"][0]["text"] == "42"
    assert [p["progress"] for p in progress["progress"]] == [1.0, 2.0]
    assert any("from 1.x" in str(entry) for entry in log["logs"])
    assert count["result"]["content"][0]["text"].endswith(f"{sid}:1")
    assert any(r["uri"] == "fixture://greeting" for r in resources["resources"])
    assert item["result"]["contents"][0]["text"] == "item 7"
    assert prompts["prompts"][0]["name"] == "review"
    assert "y = 2" in prompt["result"]["messages"][0]["content"]["text"]
    assert cleanup["result"]["content"][0]["text"] == f"session {sid} cleaned up"
