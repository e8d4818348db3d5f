"""A stock vLLM (CPU worker, tiny random gpt-oss) sees the real container namespace through the gateway."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.container.conftest import containers_of, require_docker, server_args
from tests.support.gateway import gateway_config, running_gateway
from tests.support.service import running_service

pytestmark = pytest.mark.slow


def test_vllm_renders_the_container_namespace_from_the_real_server(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.vllm import vllm_server

    require_docker()
    monkeypatch.setenv("VLLM_GPT_OSS_SYSTEM_TOOL_MCP_LABELS", "container")  # vLLM enables container only so
    instance = f"pytest-ctr-vllm-{uuid.uuid4().hex[:8]}"
    with (
        running_service(server_args(instance)) as container,
        running_gateway(gateway_config({"container": [f"{container.url}/mcp"]})) as gw,
        vllm_server(tool_servers=[f"127.0.0.1:{gw.port}/container"], keep_log=False) as worker,
    ):
        request = {
            "model": worker.model,
            "input": "List the files.",
            "tools": [{"type": "mcp", "server_label": "container", "server_url": "unused"}],
            "max_output_tokens": 8,
            "enable_response_messages": True,
        }
        response = httpx.post(f"{worker.base_url}/v1/responses", json=request, timeout=300, trust_env=False)
        log = worker.log_tail(400)
    assert response.status_code == 200, response.text
    assert "MCPToolServer initialized with tools: ['container']" in log
    namespace = response.json()["input_messages"][0]["content"][0]["tools"]["container"]
    assert namespace["name"] == "container"
    assert namespace["description"].startswith("Use `exec` to run shell commands in a Linux container")
    assert [t["name"] for t in namespace["tools"]] == ["exec"]  # the hidden helpers stay out of the prompt
    assert "session_handle" not in str(namespace)  # handles are for MCP clients; the model reads the trained shape
    assert containers_of(instance) == []
