"""A stock vLLM worker (CPU, tiny gpt-oss, dummy weights) uses the gateway as its `--tool-server`.

vLLM connects to `/{ns}/sse` for each of browser, python and container at start-up (legacy SSE,
no headers, initialize + tools/list) and renders the namespaces into the Harmony prompt; per
request it opens sessions with `x-session-id: resp_...` and ends them with `cleanup_session`.
The three namespaces are served here by fixture replicas: the gateway names them.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.gateway import GatewayProc, Upstream, call_text, connect, fixtures, gateway_config, running_gateway

pytestmark = pytest.mark.slow
NAMESPACES = ("browser", "python", "container")


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[GatewayProc, dict[str, Upstream]]]:
    with fixtures(*NAMESPACES) as ups:
        by_ns = dict(zip(NAMESPACES, ups, strict=True))
        with running_gateway(gateway_config({ns: [up.url] for ns, up in by_ns.items()})) as gw:
            yield gw, by_ns


def test_vllm_renders_the_three_gateway_namespaces_into_its_prompt(
    fleet: tuple[GatewayProc, dict[str, Upstream]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.vllm import vllm_server

    # vLLM enables `container` only for an `mcp` tool whose label is allowlisted here
    monkeypatch.setenv("VLLM_GPT_OSS_SYSTEM_TOOL_MCP_LABELS", "container")

    gw, _ = fleet
    servers = [f"127.0.0.1:{gw.port}/{ns}" for ns in NAMESPACES]
    with vllm_server(tool_servers=servers, keep_log=False) as worker:
        assert "MCPToolServer initialized with tools" in worker.log_tail(400)
        request = {
            "model": worker.model,
            "input": "What is 2 + 2?",
            "tools": [
                {"type": "web_search_preview"},
                {"type": "code_interpreter", "container": {"type": "auto"}},
                {"type": "mcp", "server_label": "container", "server_url": "unused"},
            ],
            "max_output_tokens": 8,
            "enable_response_messages": True,
        }
        response = httpx.post(f"{worker.base_url}/v1/responses", json=request, timeout=300, trust_env=False)
        assert response.status_code == 200, response.text
        system = response.json()["input_messages"][0]["content"][0]
    assert sorted(system["tools"]) == sorted(NAMESPACES)
    for ns in NAMESPACES:
        namespace = system["tools"][ns]
        assert namespace["name"] == ns
        assert namespace["description"].startswith("Fixture server")  # the upstream's instructions
        names = {t["name"] for t in namespace["tools"]}
        assert {"echo", "add", "count"} <= names
        assert "cleanup_session" not in names  # `include_in_prompt: false` survives the gateway


async def test_vllm_style_sessions_are_cleaned_up(fleet: tuple[GatewayProc, dict[str, Upstream]]) -> None:
    """What vLLM does per request, with its own client library (1.x over SSE is covered in test_mcp1)."""
    gw, _ = fleet
    async with connect(gw.url("python", "sse"), "sse", headers={"x-session-id": "resp_vllm_like"}) as client:
        assert (await call_text(client, "count")).endswith("resp_vllm_like:1")
        assert await call_text(client, "cleanup_session") == "session resp_vllm_like cleaned up"
