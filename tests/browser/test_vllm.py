"""A stock vLLM worker (CPU, tiny gpt-oss, dummy weights) sees the real browser through the gateway.

vLLM discovers `browser` once at start-up over the gateway's legacy SSE endpoint and renders it into
the Harmony system message: the description and schemas must be the real server's (harmony's own).
"""

from __future__ import annotations

import httpx
import pytest
from openai_harmony import ToolNamespaceConfig

from tests.support.gateway import gateway_config, running_gateway
from tests.support.service import Service

pytestmark = pytest.mark.slow


def test_vllm_renders_the_real_browser_namespace(browser: Service) -> None:
    from tests.support.vllm import vllm_server

    with running_gateway(gateway_config({"browser": [browser.url + "/mcp"]})) as gw:
        with vllm_server(tool_servers=[f"127.0.0.1:{gw.port}/browser"], keep_log=False) as worker:
            request = {
                "model": worker.model,
                "input": "Find tea facts.",
                "tools": [{"type": "web_search_preview"}],
                "max_output_tokens": 8,
                "enable_response_messages": True,
            }
            response = httpx.post(f"{worker.base_url}/v1/responses", json=request, timeout=300, trust_env=False)
    assert response.status_code == 200, response.text
    namespace = response.json()["input_messages"][0]["content"][0]["tools"]["browser"]
    config = ToolNamespaceConfig.browser()
    assert namespace["name"] == "browser"
    assert namespace["description"] == config.description
    tools = {t["name"]: t for t in namespace["tools"]}
    assert set(tools) == {"search", "open", "find"}  # cleanup_session is hidden from the prompt
    for spec in config.tools:
        assert tools[spec.name]["description"] == spec.description
