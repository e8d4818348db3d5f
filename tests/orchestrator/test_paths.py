"""The same conversations on both generation paths, from one table: Harmony (the scripted
`/v1/completions` worker) and chat (the scripted `/v1/chat/completions` worker). Both workers are
SCRIPTED: they stand in for the model's choices; everything else (orchestrator, tools) is real."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from conftest import Stack, scenario, serving
from invariants import check_stream
from openai.types.responses import Response
from paths import Call, Forced, Say, ToolSaid, User, chat_rules, harmony_rules
from test_basic import WEATHER_TOOL

from orchestrator.worker.scripted import ChatScenario, ScriptedChatModel, build_chat_app

CI = {"type": "code_interpreter", "container": {"type": "auto"}}
WEB = {"type": "web_search_preview"}
CONTAINER = {"type": "mcp", "server_label": "container"}


@dataclass
class Case:
    rules: list[tuple[Any, Any]]
    requests: list[dict[str, Any]]  # each continues the previous response when it sets "chain"
    check: Callable[[list[Response]], None]
    follow_up: Callable[[Response], list[dict[str, Any]]] | None = field(default=None)  # input from the last one


def _types(resp: Response) -> list[str]:
    return [o.type for o in resp.output]


def _python_state(rs: list[Response]) -> None:
    first, second = rs
    assert _types(first) == ["reasoning", "code_interpreter_call", "message"]
    assert first.output[0].content[0].text == "Let me compute."
    ci = first.output[1]
    assert ci.code == "x = 6 * 7\nprint(x)" and ci.status == "completed" and ci.outputs[0].logs == "42\n"
    assert first.output_text == "It is 42."
    assert second.output[0].outputs[0].logs == "43\n" and second.output_text == "Then 43."  # x survived


def _citations(rs: list[Response]) -> None:
    (resp,) = rs
    calls = [o for o in resp.output if o.type == "web_search_call"]
    assert [c.action.type for c in calls] == ["search", "open_page", "find_in_page"]
    assert calls[0].action.query == "tea" and calls[1].action.url == "https://example.com/tea"
    part = resp.output[-1].content[0]
    assert part.annotations[0].type == "url_citation" and part.annotations[0].url == "https://example.com/tea"
    link = "([example.com](https://example.com/tea))"
    assert part.text[part.annotations[0].start_index : part.annotations[0].end_index] == link
    assert "【" not in part.text


def _container(rs: list[Response]) -> None:
    (resp,) = rs
    item = resp.output[0]
    assert item.type == "mcp_call" and item.server_label == "container" and item.name == "exec"
    assert item.output == "hi\n" and item.status == "completed" and resp.output_text == "ran it"


def _function(rs: list[Response]) -> None:
    first, second = rs
    call = first.output[-1]
    assert call.type == "function_call" and call.name == "get_weather" and call.status == "completed"
    assert call.arguments == '{"city": "Paris"}'
    assert second.output_text == "Sunny in Paris, says the tool."


def _required(rs: list[Response]) -> None:
    (resp,) = rs
    assert resp.status == "completed" and resp.output[-1].type == "function_call"
    assert resp.output[-1].name == "get_weather" and "Sunny." not in str(resp.model_dump())


def _max_tool_calls(rs: list[Response]) -> None:
    """The third call is past the limit: never run, no item (check_stream: no events for it either); the
    model reads the refusal, answers, and the response completes."""
    (resp,) = rs
    assert resp.status == "completed" and _types(resp).count("code_interpreter_call") == 2
    assert [o.status for o in resp.output if o.type == "code_interpreter_call"] == ["completed", "completed"]
    assert resp.output_text == "stopped"


def _max_tool_calls_function(rs: list[Response]) -> None:
    """A client function past the limit is not returned to the client: the model answers instead."""
    (resp,) = rs
    assert resp.status == "completed" and "function_call" not in _types(resp)
    assert _types(resp).count("code_interpreter_call") == 1 and resp.output_text == "no more tools"


def _bad_json(rs: list[Response]) -> None:
    (resp,) = rs
    assert resp.status == "completed"
    search, fixed = resp.output[0], resp.output[-1]
    assert search.type == "web_search_call" and search.status == "failed"
    calls = [o for o in resp.output if o.type == "function_call"]
    assert [c.status for c in calls] == ["incomplete", "completed"] and calls[0].arguments == "{bad"
    assert fixed is calls[1] and fixed.arguments == '{"city": "Paris"}'


def _weather_output(resp: Response) -> list[dict[str, Any]]:
    call = resp.output[-1]
    return [{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21C"}]


CASES = {
    "python state across previous_response_id": Case(
        [
            (ToolSaid("python", "42"), Say("It is 42.")),
            (ToolSaid("python", "43"), Say("Then 43.")),
            (User("compute"), Call("python", {"code": "x = 6 * 7\nprint(x)"}, think="Let me compute.")),
            (User("again"), Call("python", {"code": "print(x + 1)"})),
        ],
        [{"input": "compute", "tools": [CI]}, {"input": "again", "tools": [CI], "chain": True}],
        _python_state,
    ),
    "browser citations": Case(
        [
            (ToolSaid("browser.find", "Find results"), Say("Green tea is Chinese 【1†L1】.")),
            (ToolSaid("browser.open", "Tea facts"), Call("browser.find", {"pattern": "green"})),
            (ToolSaid("browser.search", "†Tea facts†example.com"), Call("browser.open", {"id": 0, "cursor": 0})),
            (User("tea"), Call("browser.search", {"query": "tea"})),
        ],
        [{"input": "tea?", "tools": [WEB]}],
        _citations,
    ),
    "container exec": Case(
        [
            (ToolSaid("container.exec", "hi"), Say("ran it")),
            (User("run"), Call("container.exec", {"cmd": ["echo", "hi"]})),
        ],
        [{"input": "run", "tools": [CONTAINER]}],
        _container,
    ),
    "a client function": Case(
        [
            (ToolSaid("functions.get_weather", "sunny"), Say("Sunny in Paris, says the tool.")),
            (User("weather"), Call("functions.get_weather", {"city": "Paris"}, think="A tool knows.")),
        ],
        [{"input": "weather?", "tools": [WEATHER_TOOL]}, {"tools": [WEATHER_TOOL], "chain": True}],
        _function,
        follow_up=_weather_output,
    ),
    "tool_choice required": Case(
        [(Forced(), Call("functions.get_weather", {"city": "Paris"})), (User("weather"), Say("Sunny."))],
        [{"input": "weather?", "tools": [WEATHER_TOOL], "tool_choice": "required"}],
        _required,
    ),
    "max_tool_calls": Case(
        [
            (ToolSaid("python", "limit of this response"), Say("stopped")),
            (ToolSaid("python", ""), Call("python", {"code": "print(1)"})),
            (User("compute"), Call("python", {"code": "print(1)"})),
        ],
        [{"input": "compute", "tools": [CI], "max_tool_calls": 2}],
        _max_tool_calls,
    ),
    "max_tool_calls with a function": Case(
        [
            (ToolSaid("functions.get_weather", "limit of this response"), Say("no more tools")),
            (ToolSaid("python", ""), Call("functions.get_weather", {"city": "Paris"})),
            (User("weather"), Call("python", {"code": "print(1)"})),
        ],
        [{"input": "weather?", "tools": [CI, WEATHER_TOOL], "max_tool_calls": 1}],
        _max_tool_calls_function,
    ),
    "bad JSON": Case(
        [
            (ToolSaid("functions.get_weather", "not valid JSON"), Call("functions.get_weather", {"city": "Paris"})),
            (ToolSaid("browser.search", "not valid JSON"), Call("functions.get_weather", "{bad")),
            (User("go"), Call("browser.search", "{not json")),
        ],
        [{"input": "go", "tools": [WEB, WEATHER_TOOL]}],
        _bad_json,
    ),
}


@pytest.fixture(scope="module")
def scripted_chat() -> Iterator[tuple[str, ScriptedChatModel]]:
    model = ScriptedChatModel()
    with serving(build_chat_app(model)) as url:
        yield url, model


@pytest.fixture(params=["harmony", "chat"])
def on_path(request, make_stack, scripted_chat) -> Callable[[list[tuple[Any, Any]]], Stack]:
    """A stack whose (automatically detected) worker is the Harmony or the chat scripted worker."""

    def make(rules: list[tuple[Any, Any]]) -> Stack:
        if request.param == "harmony":
            stack = make_stack()
            stack.model.scenario = scenario(harmony_rules(rules))
            return stack
        url, model = scripted_chat
        stack = make_stack(worker_urls=[url])
        model.scenario = ChatScenario.from_dict({"rules": chat_rules(rules)})
        stack.model = model  # type: ignore[assignment]
        return stack

    return make


@pytest.mark.parametrize("name", list(CASES))
def test_conversation_case_runs_the_same_on_both_paths(name, on_path):
    case = CASES[name]
    stack = on_path(case.rules)
    done: list[Response] = []
    for req in case.requests:
        body = {k: v for k, v in req.items() if k != "chain"}
        if req.get("chain"):
            body["previous_response_id"] = done[-1].id
            if "input" not in body and case.follow_up:
                body["input"] = case.follow_up(done[-1])
        events = list(stack.client.responses.create(model="m", stream=True, **body))
        done.append(check_stream(events))
        _stored(stack, done[-1].id)
    case.check(done)


def _stored(stack: Stack, rid: str) -> None:
    """A stream ends with its terminal event; the response is stored just after: wait for it (its input
    items are listed once it is)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            stack.client.responses.input_items.list(rid)
            return
        except openai.APIStatusError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
