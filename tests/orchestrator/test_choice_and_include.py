"""tool_choice (required, a named tool), `include` values, web_search sources and client-kept history."""

from __future__ import annotations

import httpx
import pytest
from invariants import check_stream
from test_basic import WEATHER_CALL, WEATHER_TOOL

DIRECT = "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Sunny.<|return|>"
FORCED_WEATHER = ' <|constrain|>json<|message|>{"city":"Paris"}<|call|>'
SEARCH = '<|channel|>analysis to=browser.search <|constrain|>json<|message|>{"query":"tea"}<|call|>'


def test_required_tool_choice_prefills_a_tool_call_when_the_model_answers_directly(stack):
    stack.script(
        [
            ("commentary to=$", "functions.get_weather" + FORCED_WEATHER),
            ("weather", DIRECT),
        ]
    )
    events = list(
        stack.client.responses.create(
            model="gpt-oss", input="weather?", tools=[WEATHER_TOOL], tool_choice="required", stream=True
        )
    )
    resp = check_stream(events)
    assert resp.status == "completed" and [o.type for o in resp.output] == ["reasoning", "function_call"]
    assert resp.output[1].name == "get_weather" and resp.output[1].arguments == '{"city":"Paris"}'
    assert "Sunny." not in str(resp.model_dump())  # the direct answer was cut off, never shown
    assert stack.model.encode_prompt_text(-1).endswith("Easy.<|end|><|start|>assistant<|channel|>commentary to=")


def test_required_tool_choice_lets_a_model_that_calls_a_tool_alone(stack):
    stack.script([("weather", WEATHER_CALL)])
    resp = stack.client.responses.create(
        model="gpt-oss", input="weather?", tools=[WEATHER_TOOL], tool_choice="required"
    )
    assert [o.type for o in resp.output] == ["reasoning", "function_call"]
    assert not stack.model.encode_prompt_text(-1).endswith("to=")  # one turn, nothing prefilled


def test_a_named_function_is_forced_by_its_full_recipient(stack):
    stack.script([("to=functions\\.get_weather$", FORCED_WEATHER), ("weather", DIRECT)])
    resp = stack.client.responses.create(
        model="gpt-oss", input="weather?", tools=[WEATHER_TOOL], tool_choice={"type": "function", "name": "get_weather"}
    )
    assert resp.output[-1].type == "function_call" and resp.output[-1].name == "get_weather"


def test_a_model_that_still_answers_under_required_fails_the_response_clearly(stack):
    stack.script(
        [
            ("commentary to=$", "assistant<|message|>No tools for me.<|return|>"),
            ("weather", DIRECT),
        ]
    )
    resp = stack.client.responses.create(
        model="gpt-oss", input="weather?", tools=[WEATHER_TOOL], tool_choice="required"
    )
    assert resp.status == "failed" and "tool_choice requires a tool call" in resp.error.message
    assert resp.error.code == "server_error"


def test_required_code_interpreter_runs_python(stack):
    stack.script(
        [
            ("python to=assistant", "<|channel|>final<|message|>It printed 7.<|return|>"),
            ("to=python$", "<|message|>print(7)<|call|>"),
            ("compute", DIRECT),
        ]
    )
    resp = stack.client.responses.create(
        model="gpt-oss", input="compute", tools=[{"type": "code_interpreter"}], tool_choice={"type": "code_interpreter"}
    )
    assert [o.type for o in resp.output] == ["reasoning", "code_interpreter_call", "message"]
    assert resp.output[1].outputs[0].logs == "7\n" and resp.output_text == "It printed 7."


@pytest.mark.parametrize(
    ("body", "fragment", "param"),
    [
        ({"tool_choice": "required"}, "needs at least one tool", "tool_choice"),
        ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "name": "nope"}}, "'nope'", "tool_choice"),
        ({"tool_choice": {"type": "mcp", "server_label": "ghost"}}, "'ghost'", "tool_choice"),
        ({"tool_choice": {"type": "code_interpreter"}}, "unsupported tool_choice", "tool_choice"),
        ({"include": ["bogus.field"]}, "Invalid value: 'bogus.field'", "include[0]"),
        ({"include": ["computer_call_output.output.image_url"]}, "not supported by this server", "include[0]"),
    ],
)
def test_bad_tool_choice_and_include_values_are_400s(stack, body, fragment, param):
    resp = httpx.post(f"{stack.url}/v1/responses", json={"input": "x", **body})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert fragment in error["message"] and error["param"] == param and error["type"] == "invalid_request_error"


def test_web_search_sources_are_included_only_when_asked(stack):
    stack.script([("†Tea facts†example.com", DIRECT), ("tea", SEARCH)])
    tools = [{"type": "web_search_preview"}]
    plain = stack.client.responses.create(model="gpt-oss", input="tea?", tools=tools)
    assert plain.output[0].type == "web_search_call" and plain.output[0].action.sources is None
    asked = stack.client.responses.create(
        model="gpt-oss", input="tea?", tools=tools, include=["web_search_call.action.sources"]
    )
    sources = asked.output[0].action.sources
    assert [s.url for s in sources] == ["https://example.com/tea", "https://example.org/coffee"]
    assert {s.type for s in sources} == {"url"}


def test_web_search_results_are_included_only_when_asked_and_sent_back_as_history(stack):
    stack.script([("†Tea facts†example.com", DIRECT), ("tea", SEARCH)])
    tools = [{"type": "web_search"}]
    plain = stack.client.responses.create(model="gpt-oss", input="tea?", tools=tools)
    assert "results" not in plain.output[0].model_dump(exclude_unset=True)
    both = ["web_search_call.results", "web_search_call.action.sources"]
    asked = stack.client.responses.create(model="gpt-oss", input="tea?", tools=tools, include=both)
    item = asked.output[0].model_dump(exclude_unset=True)
    assert [r["url"] for r in item["results"]] == ["https://example.com/tea", "https://example.org/coffee"]
    assert item["results"][0]["title"] == "Tea facts" and item["results"][0]["text"]
    assert [s["url"] for s in item["action"]["sources"]] == [r["url"] for r in item["results"]]
    again = stack.client.responses.create(model="gpt-oss", input=[{"role": "user", "content": "tea?"}, item])
    assert again.status == "completed"


def test_a_web_search_call_in_client_kept_history_keeps_its_earlier_result(stack):
    stack.script([("†Tea facts†example.com", DIRECT), ("tea", SEARCH)])
    tools = [{"type": "web_search_preview"}]
    first = stack.client.responses.create(
        model="gpt-oss", input="tea?", tools=tools, include=["web_search_call.action.sources"]
    )
    # the history ends at the search: analysis (tool results included) before a final answer is not rendered
    history = [{"role": "user", "content": "tea?"}, first.output[0].model_dump(exclude_none=True)]
    stack.client.responses.create(model="gpt-oss", input=history, tools=tools, store=False)
    prompt = stack.model.encode_prompt_text(-1)
    assert "[0] tea\n**viewing lines" in prompt and "【0†Tea facts†example.com】" in prompt
    unknown = dict(history[1], id="ws_from_elsewhere")
    stack.client.responses.create(model="gpt-oss", input=[history[0], unknown], tools=tools)
    prompt = stack.model.encode_prompt_text(-1)
    assert "only its sources are kept" in prompt and "* https://example.com/tea" in prompt


def test_encrypted_reasoning_lets_a_stateless_client_continue(stack):
    stack.script(
        [("functions.get_weather to=assistant", "<|channel|>final<|message|>21C.<|return|>"), ("weather", WEATHER_CALL)]
    )
    first = stack.client.responses.create(
        model="gpt-oss", input="weather?", tools=[WEATHER_TOOL], store=False, include=["reasoning.encrypted_content"]
    )
    reasoning, call = first.output
    assert reasoning.encrypted_content and "Need weather." not in reasoning.encrypted_content
    sent = {"type": "reasoning", "id": reasoning.id, "summary": [], "encrypted_content": reasoning.encrypted_content}
    second = stack.client.responses.create(
        model="gpt-oss",
        tools=[WEATHER_TOOL],
        store=False,
        input=[
            {"role": "user", "content": "weather?"},
            sent,
            call.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": call.call_id, "output": "21"},
        ],
    )
    assert second.output_text == "21C."
    assert "<|channel|>analysis<|message|>Need weather.<|end|>" in stack.model.encode_prompt_text(-1)
    sent["encrypted_content"] = "tfr1.garbage!"
    resp = httpx.post(f"{stack.url}/v1/responses", json={"input": [sent], "tools": [WEATHER_TOOL]})
    assert resp.status_code == 400 and "encrypted_content is corrupt" in resp.json()["error"]["message"]


def test_output_text_logprobs_come_from_the_worker_per_token_when_included(stack):
    from orchestrator import harmony as h
    from orchestrator.worker.scripted import fake_logprob

    stack.script([], default="<|channel|>final<|message|>Héllo wörld, 42!<|return|>")
    events = list(
        stack.client.responses.create(
            model="gpt-oss", input="hi", stream=True, top_logprobs=2, include=["message.output_text.logprobs"]
        )
    )
    resp = check_stream(events)
    part = resp.output[0].content[0]
    tokens = h.encoding().encode("Héllo wörld, 42!", allowed_special="all")
    assert [lp.logprob for lp in part.logprobs] == [fake_logprob(t) for t in tokens]
    assert "".join(lp.token for lp in part.logprobs) == part.text == "Héllo wörld, 42!"
    assert all(
        len(lp.top_logprobs) == 2 and lp.top_logprobs[0].logprob >= lp.top_logprobs[1].logprob for lp in part.logprobs
    )
    assert bytes(b for lp in part.logprobs for b in lp.bytes).decode() == part.text
    streamed = [lp.logprob for e in events if e.type == "response.output_text.delta" for lp in e.logprobs]
    assert streamed == [lp.logprob for lp in part.logprobs]
    plain = stack.client.responses.create(model="gpt-oss", input="hi")
    assert plain.output[0].content[0].logprobs == []
