"""The chat path's own behaviour: path choice, the chat request it sends, usage, errors. The chat worker
here is SCRIPTED (vLLM's /v1/chat/completions wire format; replies chosen by rules)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest
from conftest import serving
from invariants import check_stream
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from test_basic import WEATHER_TOOL

from orchestrator.worker.scripted import ChatScenario, ScriptedChatModel, build_chat_app

CI = {"type": "code_interpreter"}
PY_42 = {"name": "python", "arguments": {"code": "print(42)"}}


@pytest.fixture
def chat_worker() -> Iterator[tuple[str, ScriptedChatModel]]:
    model = ScriptedChatModel()
    with serving(build_chat_app(model)) as url:
        yield url, model


@pytest.fixture
def chat_stack(make_stack, chat_worker):
    url, model = chat_worker
    stack = make_stack(worker_urls=[url])
    stack.model = model
    return stack


def script(model: ScriptedChatModel, rules: list[tuple[str, dict]], **extra) -> None:
    model.scenario = ChatScenario.from_dict({"rules": [{"match": m, "reply": r} | extra for m, r in rules]})


def test_one_orchestrator_serves_a_harmony_and_a_chat_worker_each_by_its_model_name(make_stack, scripted, chat_worker):
    chat_url, chat_model = chat_worker
    stack = make_stack(worker_urls=[scripted[0], chat_url])  # --worker-api auto: each worker's path detected
    chat = stack.client.responses.create(model="scripted-chat", input="hi")
    assert chat.output_text == "Hello from the scripted chat worker." and len(chat_model.requests) == 1
    gpt = stack.client.responses.create(model="scripted-gpt-oss", input="hi")
    assert gpt.output_text == "Hello from the scripted worker." and len(chat_model.requests) == 1


def test_a_worker_configured_as_harmony_is_not_sent_chat_requests(make_stack, chat_worker):
    url, model = chat_worker
    stack = make_stack(worker_urls=[url], worker_apis={url: "harmony"})
    with pytest.raises(openai.APIStatusError) as err:  # a chat worker has no /v1/completions: a clear 502
        stack.client.responses.create(model="scripted-chat", input="hi")
    assert err.value.status_code == 502 and "404" in err.value.message and not model.requests


def test_the_chat_request_offers_builtins_and_functions_and_threads_tool_call_ids(chat_stack):
    model = chat_stack.model
    script(
        model,
        [
            ("^tool python: 42", {"content": "It is 42."}),
            ("^user: compute", {"reasoning": "Use python.", "tool_calls": [PY_42]}),
        ],
    )
    resp = chat_stack.client.responses.create(
        model="m", input="compute", instructions="Be brief.", tools=[CI, {"type": "web_search_preview"}, WEATHER_TOOL]
    )
    assert resp.output_text == "It is 42."
    first, second = model.requests[-2], model.requests[-1]
    names = [t["function"]["name"] for t in first["tools"]]
    assert names == ["browser_search", "browser_open", "browser_find", "python", "get_weather"]
    assert first["tool_choice"] == "auto" and first["stream"] and first["return_token_ids"]
    assert first["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "compute"}]
    call, result = second["messages"][-2], second["messages"][-1]
    assert call["role"] == "assistant" and call["reasoning"] == "Use python."
    assert call["tool_calls"][0]["function"] == {"name": "python", "arguments": '{"code": "print(42)"}'}
    assert result == {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": "42\n"}


def test_usage_is_the_chat_workers_own_token_counts_turn_by_turn(chat_stack):
    model = chat_stack.model
    script(
        model,
        [
            ("^tool python: ", {"content": "done here"}),
            ("^user: ", {"reasoning": "think a bit first", "tool_calls": [PY_42]}),
        ],
    )
    model.usages.clear()
    events = list(chat_stack.client.responses.create(model="m", input="go", tools=[CI], stream=True))
    resp = check_stream(events)
    first, second = model.usages
    assert resp.usage.input_tokens == first["prompt_tokens"] + second["prompt_tokens"]
    assert resp.usage.output_tokens == first["completion_tokens"] + second["completion_tokens"]
    cached = first["prompt_tokens_details"]["cached_tokens"] + second["prompt_tokens_details"]["cached_tokens"]
    assert resp.usage.input_tokens_details.cached_tokens == cached > 0  # turn 2 extends turn 1's prompt
    tool_output = second["prompt_tokens"] - first["prompt_tokens"] - first["completion_tokens"]
    assert resp.usage.output_tokens_details.tool_output_tokens == tool_output > 0
    assert resp.usage.output_tokens_details.reasoning_tokens == len(model.ids("think a bit first"))


def test_two_tool_calls_in_one_turn_both_run_before_the_model_answers(chat_stack):
    calls = [
        {"name": "python", "arguments": {"code": "a = 1\nprint(a)"}},
        {"name": "python", "arguments": {"code": "print(a + 1)"}},
    ]
    script(chat_stack.model, [("^tool python: 2", {"content": "1 then 2"}), ("^user: ", {"tool_calls": calls})])
    events = list(chat_stack.client.responses.create(model="m", input="go", tools=[CI], stream=True))
    resp = check_stream(events)
    assert [o.type for o in resp.output] == ["code_interpreter_call", "code_interpreter_call", "message"]
    assert [o.outputs[0].logs for o in resp.output[:2]] == ["1\n", "2\n"] and resp.output_text == "1 then 2"


def test_named_and_namespace_tool_choices_become_chat_tool_choices(chat_stack):
    model = chat_stack.model
    script(model, [("^tool_choice: ", {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]})])
    chat_stack.client.responses.create(
        model="m", input="w", tools=[WEATHER_TOOL, CI], tool_choice={"type": "function", "name": "get_weather"}
    )
    assert model.requests[-1]["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    script(
        model,
        [("^tool_choice: ", {"tool_calls": [{"name": "browser_search", "arguments": {"query": "x"}}]})],
    )
    chat_stack.client.responses.create(
        model="m",
        input="w",
        tools=[WEATHER_TOOL, {"type": "web_search_preview"}],
        tool_choice={"type": "web_search_preview"},
    )
    forced = next(r for r in model.requests if r.get("tool_choice") == "required")
    assert [t["function"]["name"] for t in forced["tools"]] == ["browser_search", "browser_open", "browser_find"]
    assert model.requests[-1]["tool_choice"] == "auto"  # only the first call is forced


def test_a_model_that_ignores_required_fails_the_response_clearly(chat_stack):
    script(chat_stack.model, [("^user: ", {"content": "no tools for me"})])
    resp = chat_stack.client.responses.create(model="m", input="w", tools=[WEATHER_TOOL], tool_choice="required")
    assert resp.status == "failed" and "tool_choice requires a tool call" in resp.error.message


def test_bad_python_arguments_go_back_to_the_model(chat_stack):
    script(
        chat_stack.model,
        [
            ("^tool python: Error: the tool arguments are not valid JSON", {"content": "sorry"}),
            ("^user: ", {"tool_calls": [{"name": "python", "arguments": "{print(1)"}]}),
        ],
    )
    events = list(chat_stack.client.responses.create(model="m", input="go", tools=[CI], stream=True))
    resp = check_stream(events)
    assert resp.output[0].type == "code_interpreter_call" and resp.output[0].status == "failed"
    assert resp.output_text == "sorry"


def test_unsupported_requests_and_name_clashes_are_clear_400s(chat_stack):
    with pytest.raises(openai.BadRequestError, match="not supported for chat-template models"):
        chat_stack.client.responses.create(model="m", input="x", include=["message.output_text.logprobs"])
    clash = {"type": "function", "name": "browser_search", "parameters": {"type": "object"}}
    with pytest.raises(openai.BadRequestError, match="browser_search"):
        chat_stack.client.responses.create(model="m", input="x", tools=[{"type": "web_search_preview"}, clash])


def test_a_chat_worker_error_before_any_delta_is_a_503(chat_stack):
    script(chat_stack.model, [("^user: ", {})], status=503)
    with pytest.raises(openai.APIStatusError) as err:
        chat_stack.client.responses.create(model="m", input="x")
    assert err.value.status_code == 503


def test_the_scripted_chat_worker_speaks_the_sdks_chat_completion_types(chat_worker):
    url, model = chat_worker
    script(
        model, [("^user: ", {"reasoning": "hm", "content": "ok", "tool_calls": [{"name": "f", "arguments": {"a": 1}}]})]
    )
    body = {"model": "scripted-chat", "messages": [{"role": "user", "content": "x"}], "return_token_ids": True}
    whole = ChatCompletion.model_validate(httpx.post(f"{url}/v1/chat/completions", json=body).json())
    msg = whole.choices[0].message
    assert msg.content == "ok" and msg.tool_calls[0].function.arguments == '{"a": 1}'
    assert whole.choices[0].finish_reason == "tool_calls" and whole.usage.completion_tokens > 0
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model="scripted-chat", messages=body["messages"], stream=True, stream_options={"include_usage": True}
        )
    )
    assert all(isinstance(c, ChatCompletionChunk) for c in chunks) and chunks[-1].usage.total_tokens > 0
    args = "".join(
        c.choices[0].delta.tool_calls[0].function.arguments or ""
        for c in chunks
        if c.choices and c.choices[0].delta.tool_calls
    )
    assert args == '{"a": 1}'


def test_an_apply_patch_call_on_the_chat_path_is_an_apply_patch_call_item(chat_stack):
    operation = {"type": "create_file", "path": "a.txt", "diff": "+hello"}
    script(chat_stack.model, [("^user: ", {"tool_calls": [{"name": "apply_patch", "arguments": operation}]})])
    events = list(
        chat_stack.client.responses.create(model="m", input="go", tools=[{"type": "apply_patch"}], stream=True)
    )
    call = check_stream(events).output[0]
    assert (call.type, call.status, call.operation.model_dump()) == ("apply_patch_call", "completed", operation)
    assert [t["function"]["name"] for t in chat_stack.model.requests[-1]["tools"]] == ["apply_patch"]


def test_tool_choice_apply_patch_on_the_chat_path_names_the_function_and_needs_the_tool(chat_stack):
    operation = {"type": "delete_file", "path": "a.txt"}
    script(chat_stack.model, [("^user: ", {"tool_calls": [{"name": "apply_patch", "arguments": operation}]})])
    tools = [{"type": "apply_patch"}, WEATHER_TOOL]
    forced = {"type": "apply_patch"}
    response = chat_stack.client.responses.create(model="m", input="go", tools=tools, tool_choice=forced)
    assert response.output[0].type == "apply_patch_call" and response.tool_choice.type == "apply_patch"
    sent = chat_stack.model.requests[-1]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "apply_patch"}}
    with pytest.raises(openai.BadRequestError) as err:
        chat_stack.client.responses.create(model="m", input="go", tools=[WEATHER_TOOL], tool_choice=forced)
    assert err.value.body["param"] == "tool_choice" and "apply_patch, which is not in tools" in err.value.message


def test_a_client_tool_search_on_the_chat_path_is_a_tool_search_call_and_its_output_comes_back(chat_stack):
    model = chat_stack.model
    search = {"name": "tool_search", "arguments": {"query": "weather"}}
    script(model, [("^tool tool_search: ", {"content": "Found it."}), ("^user: ", {"tool_calls": [search]})])
    tool = {"type": "tool_search", "execution": "client", "parameters": {"type": "object"}}
    first = chat_stack.client.responses.create(model="m", input="find a tool", tools=[tool])
    call = first.output[0]
    assert (call.type, call.arguments, call.execution) == ("tool_search_call", {"query": "weather"}, "client")
    found = {"type": "tool_search_output", "call_id": call.call_id, "execution": "client", "tools": []}
    second = chat_stack.client.responses.create(model="m", previous_response_id=first.id, input=[found], tools=[tool])
    assert second.output_text == "Found it."
    assert model.requests[-1]["messages"][-1]["role"] == "tool"


def test_a_custom_tool_on_the_chat_path_takes_its_text_as_input_and_streams_it(chat_stack):
    model = chat_stack.model
    note = {"name": "note", "arguments": {"input": "buy milk\nand bread"}}
    script(model, [("^tool note: saved", {"content": "Noted."}), ("^user: ", {"tool_calls": [note]})])
    tool = {"type": "custom", "name": "note", "description": "Save a note."}
    events = list(chat_stack.client.responses.create(model="m", input="remember", tools=[tool], stream=True))
    call = check_stream(events).output[0]
    assert (call.type, call.name, call.input) == ("custom_tool_call", "note", "buy milk\nand bread")
    deltas = [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"]
    assert "".join(deltas) == "buy milk\nand bread"
    offered = model.requests[-1]["tools"][0]["function"]
    assert offered["name"] == "note" and offered["parameters"]["required"] == ["input"]
    output = {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "saved"}
    history = [{"role": "user", "content": "remember"}, call.model_dump(exclude_none=True), output]
    second = chat_stack.client.responses.create(model="m", input=history, tools=[tool], store=False)
    assert second.output_text == "Noted."
    sent = model.requests[-1]["messages"][-2]["tool_calls"][0]["function"]
    assert json.loads(sent["arguments"]) == {"input": "buy milk\nand bread"}  # the text wrapped again
    grammar = {**tool, "format": {"type": "grammar", "syntax": "regex", "definition": "[a-z]+"}}
    with pytest.raises(openai.BadRequestError, match="grammar"):
        chat_stack.client.responses.create(model="m", input="x", tools=[grammar])


IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}


def test_images_go_to_a_vision_model_as_image_url_parts_and_other_models_refuse_naming_the_model(
    make_stack, chat_worker, stack
):
    url, model = chat_worker
    vision = make_stack(worker_urls=[url], vision_models="m")
    script(model, [("^user: ", {"content": "A logo."})])
    content = [{"type": "input_text", "text": "What is it?"}, IMAGE, {"type": "input_text", "text": " Briefly."}]
    resp = vision.client.responses.create(model="m", input=[{"role": "user", "content": content}])
    assert resp.output_text == "A logo."
    sent = model.requests[-1]["messages"][-1]
    assert sent == {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is it?"},
            {"type": "image_url", "image_url": {"url": IMAGE["image_url"]}},
            {"type": "text", "text": " Briefly."},
        ],
    }
    fetched = {"type": "input_image", "image_url": "http://127.0.0.1:9/inside.png"}
    with pytest.raises(openai.BadRequestError) as refused:  # never a URL the worker would fetch in the fleet
        vision.client.responses.create(model="m", input=[{"role": "user", "content": [fetched]}])
    assert refused.value.body["param"] == "input[0].content" and "data:image/" in refused.value.message
    for client, name in ((make_stack(worker_urls=[url]).client, "m"), (stack.client, "gpt-oss")):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model=name, input=[{"role": "user", "content": content}])
        assert refused.value.body["param"] == "input[0].content[1]"
        assert f"model {name!r} does not take image input" in refused.value.message
    conv = stack.client.conversations.create(items=[{"type": "message", "role": "user", "content": content}])
    with pytest.raises(openai.BadRequestError) as refused:  # an image kept in the history it continues
        stack.client.responses.create(model="gpt-oss", input="and now?", conversation=conv.id)
    assert refused.value.body["param"] == "conversation" and "history" in refused.value.message
