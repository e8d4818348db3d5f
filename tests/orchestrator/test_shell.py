"""Container commands as `shell_call` + `shell_call_output` when the request carries a `shell` tool."""

from __future__ import annotations

import httpx
import pytest
from invariants import check_stream
from openai.types.responses import Response

ECHO = '<|channel|>commentary to=container.exec <|constrain|>json<|message|>{"cmd":["echo","hi there"]}<|call|>'
FAIL = '<|channel|>commentary to=container.exec <|constrain|>json<|message|>{"cmd":["fail"]}<|call|>'
OK = "<|channel|>final<|message|>ok<|return|>"


def test_container_exec_comes_out_as_shell_call_and_output_when_the_client_sent_a_shell_tool(stack):
    stack.script([("container.exec to=assistant", OK), ("run", ECHO)])
    events = list(stack.client.responses.create(model="gpt-oss", input="run", tools=[{"type": "shell"}], stream=True))
    resp = check_stream(events)  # every shell event and item parses with the SDK's types
    Response.model_validate(resp.model_dump())
    call, output, message = resp.output
    assert call.type == "shell_call" and call.action.commands == ["echo 'hi there'"] and call.status == "completed"
    assert output.type == "shell_call_output" and output.call_id == call.call_id and output.status == "completed"
    assert output.output[0].stdout == "hi there\n" and output.output[0].outcome.exit_code == 0
    assert message.content[0].text == "ok" and resp.tools[0].type == "shell"
    types = [e.type for e in events if e.type.startswith("response.shell_call")]
    assert types == [
        "response.shell_call_command.added",
        "response.shell_call_command.delta",
        "response.shell_call_command.done",
        "response.shell_call_output_content.delta",
        "response.shell_call_output_content.done",
    ]
    assert "namespace container" in stack.model.encode_prompt_text(-1)


def test_a_failing_command_is_stderr_with_a_nonzero_exit_and_the_model_goes_on(stack):
    stack.script([("command failed", "<|channel|>final<|message|>it failed<|return|>"), ("run", FAIL)])
    resp = stack.client.responses.create(model="gpt-oss", input="run", tools=[{"type": "shell"}])
    chunk = resp.output[1].output[0]
    assert "command failed" in chunk.stderr and chunk.stdout == "" and chunk.outcome.exit_code == 1
    assert resp.output_text == "it failed"


def test_without_a_shell_tool_the_same_call_stays_an_mcp_call(stack):
    stack.script([("container.exec to=assistant", OK), ("run", ECHO)])
    resp = stack.client.responses.create(
        model="gpt-oss", input="run", tools=[{"type": "mcp", "server_label": "container"}]
    )
    assert [o.type for o in resp.output] == ["mcp_call", "message"]


def test_shell_items_in_client_kept_history_render_as_the_exec_call_and_its_output(stack):
    stack.script([("container.exec to=assistant", OK), ("run", ECHO)])
    first = stack.client.responses.create(model="gpt-oss", input="run", tools=[{"type": "shell"}], store=False)
    history = [{"role": "user", "content": "run"}, *(o.model_dump(exclude_none=True) for o in first.output[:2])]
    stack.client.responses.create(model="gpt-oss", input=history, tools=[{"type": "shell"}], store=False)
    prompt = stack.model.encode_prompt_text(-1)
    assert 'to=container.exec<|channel|>commentary json<|message|>{"cmd": ["echo", "hi there"]}<|call|>' in prompt
    assert "<|start|>container.exec to=assistant<|channel|>commentary<|message|>hi there\n<|end|>" in prompt


@pytest.mark.parametrize(
    ("environment", "status", "param"),
    [
        ({"type": "container_reference", "container_id": "cntr_x"}, 404, "tools[0].environment.container_id"),
        ({"type": "container_reference", "container_id": 7}, 404, "tools[0].environment.container_id"),
        ({"type": "container_reference", "container_id": "cntr_x", "x": 1}, 400, "tools[0].environment"),
        ({"type": "sandbox"}, 400, "tools[0].environment"),
    ],
)
def test_a_container_reference_names_one_of_the_caller_s_containers(stack, environment, status, param):
    """A missing container is a 404 naming it (files in and out: test_container_files); a local environment
    is the client's (test_client_tools)."""
    body = {"input": "x", "tools": [{"type": "shell", "environment": environment}]}
    resp = httpx.post(f"{stack.url}/v1/responses", json=body)
    assert (resp.status_code, resp.json()["error"]["param"]) == (status, param)
