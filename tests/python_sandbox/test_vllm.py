"""A stock vLLM (CPU worker, tiny random gpt-oss) uses the python server as its `--tool-server`."""

from __future__ import annotations

import httpx
import pytest

from tests.python_sandbox.conftest import require_backend, server_args
from tests.support.service import running_service
from tests.support.vllm import vllm_server

pytestmark = pytest.mark.slow


def test_vllm_discovers_the_python_namespace_and_serves_code_interpreter_requests() -> None:
    require_backend("local")
    with (
        running_service(server_args("local", "pytest-vllm")) as python,
        vllm_server(tool_servers=[f"127.0.0.1:{python.port}"]) as vllm,
    ):
        request = {
            "model": vllm.model,
            "input": "What is 2**10? Use python.",
            "max_output_tokens": 24,
            "tools": [{"type": "code_interpreter", "container": {"type": "auto"}}],
        }
        response = httpx.post(f"{vllm.base_url}/v1/responses", json=request, timeout=120)
        log = vllm.log_tail(400)
        calls = python.log()
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "response" and body["status"] in ("completed", "incomplete")
    assert "MCPToolServer initialized with tools: ['python']" in log  # discovered over SSE: serverInfo.name
    assert '"event": "server.started"' in calls
