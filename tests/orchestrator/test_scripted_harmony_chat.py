"""The SCRIPTED Harmony stand-in's `/v1/chat/completions` (`orchestrator/worker/scripted/harmony_chat.py`):
the messages rendered to Harmony, the scripted reply parsed into reasoning, content and tool calls, streamed
or whole alike, with usage counting the Harmony tokens. The clients' view of it: `tests/clients/test_readme.py`."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from orchestrator.harmony import encoding
from orchestrator.worker.scripted import Scenario, ScriptedModel, build_app

CALL = (
    "<|channel|>analysis<|message|>A tool knows.<|end|><|start|>assistant"
    '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
)
RULES = [
    {
        "match": "functions\\.get_weather to=assistant.*sunny",
        "reply": "<|channel|>final<|message|>It is sunny.<|return|>",
    },
    {"match": "user<\\|message\\|>weather", "reply": CALL},
    {"match": "user<\\|message\\|>picture", "status": 400},
]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


@pytest.fixture
def worker() -> tuple[ScriptedModel, httpx.AsyncClient]:
    model = ScriptedModel(Scenario.from_dict({"rules": RULES}))
    return model, httpx.AsyncClient(transport=httpx.ASGITransport(build_app(model)), base_url="http://worker")


async def _both(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The whole answer and the streamed chunks of the same request."""
    whole = (await client.post("/v1/chat/completions", json=body)).json()
    streamed = await client.post(
        "/v1/chat/completions", json={**body, "stream": True, "stream_options": {"include_usage": True}}
    )
    lines = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return whole, [json.loads(line) for line in lines[:-1]]


async def test_a_tool_call_is_parsed_from_harmony_whole_and_streamed_with_the_harmony_token_usage(worker):
    model, client = worker
    body = {"model": "m", "tools": TOOLS, "messages": [{"role": "user", "content": "weather in Paris?"}]}
    whole, chunks = await _both(client, body)
    message = whole["choices"][0]["message"]
    assert message["reasoning"] == "A tool knows." and message["content"] == ""
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == [
        ("get_weather", '{"city": "Paris"}')
    ]
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    reply = encoding().encode(CALL, allowed_special="all")
    assert whole["usage"]["completion_tokens"] == len(reply)  # every Harmony token, the stop token included
    assert whole["usage"]["prompt_tokens"] == len(model.prompts[-1])
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning", "") for d in deltas) == "A tool knows."
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "get_weather" and calls[0]["id"].startswith("chatcmpl-tool-")
    assert "".join(tc["function"]["arguments"] for tc in calls) == '{"city": "Paris"}'
    assert chunks[-1]["usage"] == {
        **whole["usage"],
        "prompt_tokens_details": {"cached_tokens": len(model.prompts[-1]) - 1},
    }


async def test_the_tool_result_goes_back_as_harmony_and_the_answer_is_content(worker):
    model, client = worker
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": None, "reasoning": "A tool knows.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    whole, chunks = await _both(client, {"model": "m", "tools": TOOLS, "messages": messages})
    assert whole["choices"][0]["message"]["content"] == "It is sunny."
    assert whole["choices"][0]["finish_reason"] == "stop"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == "It is sunny."
    prompt = model.encode_prompt_text(-1)
    assert "# Instructions\n\nBe brief." in prompt and "type get_weather" in prompt
    assert (
        '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>'
        in prompt
    )
    assert prompt.endswith(
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>sunny<|end|><|start|>assistant"
    )


async def test_what_it_cannot_render_is_a_400_naming_it_and_a_scripted_status_is_answered(worker):
    _, client = worker
    image = [{"type": "image_url", "image_url": {"url": "data:,"}}]
    cases = [
        ({"messages": [{"role": "user", "content": image}]}, "content part type 'image_url'"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "web_search"}]},
            "tool type 'web_search'",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "huge"}, "reasoning_effort 'huge'"),
    ]
    for body, named in cases:
        answer = await client.post("/v1/chat/completions", json=body)
        assert answer.status_code == 400 and named in answer.json()["error"]["message"]
    refused = await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "picture"}]})
    assert refused.status_code == 400 and refused.json()["error"]["message"] == "scripted failure (HTTP 400)"
