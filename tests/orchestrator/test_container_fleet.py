"""The orchestrator's `shell_call` path through the real gateway to the real container tool server (real docker)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.container.conftest import containers_of, require_docker, server_args
from tests.support.gateway import gateway_config, running_gateway
from tests.support.service import running_service

EXEC = "<|channel|>commentary to=container.exec <|constrain|>json<|message|>{args}<|call|>"
OK = "<|channel|>final<|message|>done<|return|>"


@pytest.fixture(scope="module")
def gateway_url() -> Iterator[str]:
    require_docker()
    instance = f"pytest-ctr-fleet-{uuid.uuid4().hex[:8]}"
    with running_service(server_args(instance)) as container:
        with running_gateway(gateway_config({"container": [f"{container.url}/mcp"]})) as gw:
            yield gw.base
    assert containers_of(instance) == []


def test_shell_calls_run_in_one_persistent_container_across_the_conversation(make_stack, gateway_url):
    stack = make_stack(tools_url=gateway_url, python_url=None, browser_url=None, container_url=None)
    write = EXEC.format(args='{"cmd": ["bash", "-lc", "echo kept > f; echo wrote; echo warn >&2; exit 3"]}')
    read = EXEC.format(args='{"cmd": ["cat", "f"]}')
    stack.script([("container.exec to=assistant", OK), ("first", write), ("second", read)])
    tools = [{"type": "shell"}]
    first = stack.client.responses.create(model="gpt-oss", input="first", tools=tools)
    call, output, _ = first.output
    assert call.type == "shell_call" and output.type == "shell_call_output"
    chunk = output.output[0]
    assert (chunk.stdout, chunk.stderr, chunk.outcome.exit_code) == ("wrote\n", "warn\n", 3)
    second = stack.client.responses.create(model="gpt-oss", input="second", tools=tools, previous_response_id=first.id)
    chunk = second.output[1].output[0]
    assert (chunk.stdout, chunk.outcome.exit_code) == ("kept\n", 0)  # the same session's container
    prompt = stack.model.encode_prompt_text(-1)
    assert "namespace container" in prompt and "toolfleet/container-sandbox:latest" in prompt  # real instructions
    assert "session_handle" not in prompt  # the orchestrator keeps state by x-session-id: the model never sees handles


def test_a_timed_out_command_is_a_timeout_outcome(make_stack, gateway_url):
    stack = make_stack(tools_url=gateway_url, python_url=None, browser_url=None, container_url=None)
    slow = EXEC.format(args='{"cmd": ["sleep", "30"], "timeout": 1}')
    stack.script([("container.exec to=assistant", OK), ("slow", slow)])
    resp = stack.client.responses.create(model="gpt-oss", input="slow", tools=[{"type": "shell"}])
    assert resp.output[1].output[0].outcome.type == "timeout"
