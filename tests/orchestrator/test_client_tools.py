"""Tools the client runs itself: their calls come out as items for the client, their outputs go back in."""

from __future__ import annotations

import json

import openai
import pytest
from invariants import check_stream

NAMESPACE = {
    "type": "namespace",
    "name": "crm",
    "description": "Customer records.",
    "tools": [
        {
            "type": "function",
            "name": "lookup",
            "description": "Find a customer.",
            "parameters": {"type": "object", "properties": {"email": {"type": "string"}}},
        }
    ],
}
LOOKUP = '<|channel|>commentary to=crm.lookup <|constrain|>json<|message|>{"email": "a@b.c"}<|call|>'


def _sent_back(stack, prompt: str, call, output: dict, tools: list[dict]):
    """The next response of a client-kept (store: false) history: the prompt, the call, the client's output."""
    history = [{"role": "user", "content": prompt}, call.model_dump(exclude_none=True), output]
    return stack.client.responses.create(model="m", input=history, tools=tools, store=False)


def test_a_namespaced_function_call_carries_its_namespace_and_its_output_comes_back_unstored(stack):
    stack.script(
        [("crm\\.lookup to=assistant.*Ada", "<|channel|>final<|message|>It is Ada.<|return|>"), ("who is", LOOKUP)]
    )
    events = list(
        stack.client.responses.create(model="m", input="who is a@b.c?", tools=[NAMESPACE], store=False, stream=True)
    )
    call = check_stream(events).output[0]
    assert (call.type, call.namespace, call.name, call.arguments) == (
        "function_call",
        "crm",
        "lookup",
        '{"email": "a@b.c"}',
    )
    assert "namespace crm {" in stack.model.encode_prompt_text(-1)  # shown to the model as one namespace
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "Ada"}
    second = _sent_back(stack, "who is a@b.c?", call, output, [NAMESPACE])
    assert second.output_text == "It is Ada."
    assert "<|start|>crm.lookup to=assistant" in stack.model.encode_prompt_text(-1)


EXEC = '<|channel|>commentary to=container.exec <|constrain|>json<|message|>{"cmd": ["ls", "-l"], "timeout": 5}<|call|>'


def test_a_local_shell_call_is_the_clients_to_run_and_its_output_comes_back(stack):
    stack.script(
        [("container\\.exec to=assistant.*total 0", "<|channel|>final<|message|>Empty.<|return|>"), ("list", EXEC)]
    )
    for tool, kind in (
        ({"type": "local_shell"}, "local_shell_call"),
        ({"type": "shell", "environment": {"type": "local"}}, "shell_call"),
    ):
        events = list(stack.client.responses.create(model="m", input="list files", tools=[tool], stream=True))
        call = check_stream(events).output[0]
        assert call.type == kind and call.status == "completed"
        if kind == "shell_call":
            assert call.action.commands == ["ls -l"] and call.action.timeout_ms == 5000
            assert call.environment.type == "local"
            output = {
                "type": "shell_call_output",
                "call_id": call.call_id,
                "output": [{"stdout": "total 0", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
            }
        else:
            assert call.action.command == ["ls", "-l"] and call.action.timeout_ms == 5000
            output = {"type": "local_shell_call_output", "id": call.call_id, "output": "total 0"}
        second = _sent_back(stack, "list files", call, output, [tool])
        assert second.output_text == "Empty."
    assert "namespace container" in stack.model.encode_prompt_text(-1)  # the exec contract, on the user's machine


FORECAST = '<|channel|>commentary to=weather.get_forecast <|constrain|>json<|message|>{"city": "Oslo"}<|call|>'


def test_an_approval_in_a_stateless_history_resumes_the_call(stack, tool_urls):
    stack.script(
        [
            ("weather\\.get_forecast to=assistant.*Sunny in Oslo", "<|channel|>final<|message|>Sunny.<|return|>"),
            ("Oslo", FORECAST),
        ]
    )
    tools = [
        {"type": "mcp", "server_label": "weather", "server_url": tool_urls["weather"], "require_approval": "always"}
    ]
    first = stack.client.responses.create(model="m", input="Oslo?", tools=tools, store=False)
    request = first.output[-1]
    assert request.type == "mcp_approval_request"
    history = [
        {"role": "user", "content": "Oslo?"},
        *[o.model_dump(exclude_none=True) for o in first.output],
        {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True},
    ]
    second = stack.client.responses.create(model="m", input=history, tools=tools, store=False)
    assert [o.type for o in second.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert second.output[1].approval_request_id == request.id and second.output_text == "Sunny."


LARK = 'start: "*** Begin Patch" LF /(.+)/ LF "*** End Patch"\n%import common.LF\n'
PATCH_TOOL = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": LARK},
}
PATCH = "*** Begin Patch\nadd hello\n*** End Patch"


def test_a_custom_tool_call_is_written_under_its_grammar_and_streams_its_input(stack):
    stack.script(
        [
            ("functions\\.apply_patch to=assistant.*Done!", "<|channel|>final<|message|>Patched.<|return|>"),
            ("to=functions\\.apply_patch<\\|message\\|>$", PATCH + "<|call|>"),  # the constrained retry
            ("patch it", "<|channel|>commentary to=functions.apply_patch<|message|>not a patch<|call|>"),
        ]
    )
    events = list(stack.client.responses.create(model="m", input="patch it", tools=[PATCH_TOOL], stream=True))
    call = check_stream(events).output[0]
    assert (call.type, call.name, call.input) == ("custom_tool_call", "apply_patch", PATCH)
    deltas = "".join(e.delta for e in events if e.type == "response.custom_tool_call_input.delta")
    sent = [o.get("structured_outputs") for o in stack.model.options][-2:]
    assert deltas == PATCH and sent == [None, {"grammar": LARK}]  # free first, then under the grammar
    output = {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done!"}
    second = _sent_back(stack, "patch it", call, output, [PATCH_TOOL])
    assert second.output_text == "Patched."
    assert "apply_patch" in stack.model.encode_prompt_text(-1) and "Freeform" in stack.model.encode_prompt_text(-1)


def test_dated_web_search_aliases_are_web_search(stack):
    stack.script([], default="<|channel|>final<|message|>ok<|return|>")
    for kind in ("web_search_2025_08_26", "web_search_preview_2025_03_11"):
        resp = stack.client.responses.create(model="m", input="hi", tools=[{"type": kind}])
        assert resp.tools[0].type == kind and "namespace browser" in stack.model.encode_prompt_text(-1)


def test_allowed_tools_shows_the_model_only_the_tools_it_names(stack):
    stack.script([], default="<|channel|>final<|message|>ok<|return|>")
    tools = [
        {"type": "function", "name": "alpha", "parameters": {"type": "object", "properties": {}}},
        {"type": "function", "name": "beta", "parameters": {"type": "object", "properties": {}}},
    ]
    choice = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "beta"}]}
    stack.client.responses.create(model="m", input="hi", tools=tools, tool_choice=choice)
    prompt = stack.model.encode_prompt_text(-1)
    assert "type beta" in prompt and "type alpha" not in prompt
    with pytest.raises(openai.BadRequestError) as caught:
        choice["tools"] = [{"type": "function", "name": "gamma"}]
        stack.client.responses.create(model="m", input="hi", tools=tools, tool_choice=choice)
    assert caught.value.body["param"] == "tool_choice.tools[0]"


OPERATION = {"type": "update_file", "path": "notes.txt", "diff": "@@\n-old\n+new\n"}
OPERATION_CALL = (
    f"<|channel|>commentary to=functions.apply_patch <|constrain|>json<|message|>{json.dumps(OPERATION)}<|call|>"
)


def test_an_apply_patch_call_carries_its_operation_and_the_clients_output_comes_back(stack):
    stack.script(
        [
            ("apply_patch to=assistant.*completed: updated notes", "<|channel|>final<|message|>Patched.<|return|>"),
            ("fix the note", OPERATION_CALL),
        ]
    )
    tools = [{"type": "apply_patch"}]
    events = list(stack.client.responses.create(model="m", input="fix the note", tools=tools, stream=True))
    first = check_stream(events)
    call = first.output[0]
    assert (call.type, call.status, call.operation.model_dump()) == ("apply_patch_call", "completed", OPERATION)
    assert "apply_patch" in stack.model.encode_prompt_text(-1)  # shown to the model as a function
    output = {"type": "apply_patch_call_output", "call_id": call.call_id, "status": "completed"}
    output["output"] = "updated notes.txt"
    stored = stack.client.responses.create(model="m", previous_response_id=first.id, input=[output], tools=tools)
    assert stored.output_text == "Patched."
    stateless = _sent_back(stack, "fix the note", call, output, tools)  # store: false, the call sent back
    assert stateless.output_text == "Patched."
    assert (
        "<|start|>functions.apply_patch to=assistant<|channel|>commentary<|message|>completed: updated notes.txt"
        in (stack.model.encode_prompt_text(-1))
    )


def test_tool_choice_apply_patch_prefills_the_call_and_a_call_that_is_no_operation_is_told_to_the_model(stack):
    bad = '<|channel|>commentary to=functions.apply_patch <|constrain|>json<|message|>{"type": "rename"}<|call|>'
    stack.script([("must be one of create_file", OPERATION_CALL), ("fix", bad)])
    response = stack.client.responses.create(
        model="m", input="fix", tools=[{"type": "apply_patch"}], tool_choice={"type": "apply_patch"}
    )
    assert [i.type for i in response.output] == ["apply_patch_call"]
    assert response.output[0].operation.model_dump() == OPERATION
    assert response.tool_choice.type == "apply_patch"


def test_apply_patch_is_refused_with_programmatic_callers_and_unknown_call_ids(stack):
    with pytest.raises(openai.BadRequestError) as err:
        stack.client.responses.create(
            model="m", input="x", tools=[{"type": "apply_patch", "allowed_callers": ["programmatic"]}]
        )
    assert err.value.body["param"] == "tools[0].allowed_callers"
    orphan = {"type": "apply_patch_call_output", "call_id": "call_nope", "status": "completed"}
    with pytest.raises(openai.BadRequestError) as err:
        stack.client.responses.create(model="m", input=[orphan], tools=[{"type": "apply_patch"}])
    assert err.value.body["param"] == "input[0].call_id"
