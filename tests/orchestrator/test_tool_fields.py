"""Every field of every tool type of the openai SDK is classified by the kind that owns the type (honoured,
no effect, or refused), and what is refused or unknown is a 400 naming `tools[i].field`."""

from __future__ import annotations

import typing

import openai
import pytest
from openai.types.responses.tool_param import ToolParam

from orchestrator.kinds import TOOLS

UNSUPPORTED = {"computer", "computer_use_preview", "image_generation", "programmatic_tool_calling"}
OWNERS = {t: kind for kind in TOOLS for t in kind.tool_types}


def _literals(hint: typing.Any) -> tuple[str, ...]:
    if typing.get_origin(hint) is typing.Literal:
        return typing.get_args(hint)
    return tuple(v for arg in typing.get_args(hint) for v in _literals(arg))


SDK_TOOLS = {
    t: set(hints) - {"type"}
    for hints in (typing.get_type_hints(member) for member in typing.get_args(ToolParam))
    for t in _literals(hints["type"])
}


def test_every_field_of_every_sdk_tool_type_is_classified_by_its_kind():
    assert set(SDK_TOOLS) - set(OWNERS) == UNSUPPORTED, "a new tool type: give it a kind or list it as unsupported"
    for tool_type, fields in SDK_TOOLS.items():
        if tool_type in OWNERS:
            assert sorted(fields - set(OWNERS[tool_type].fields)) == [], f"classify in the {tool_type} kind"
    for kind in TOOLS:  # and nothing is classified that no SDK type of the kind has
        known = set().union(*(SDK_TOOLS[t] for t in kind.tool_types if t in SDK_TOOLS))
        assert set(kind.fields) <= known, f"{kind.tool_types} classifies fields the SDK does not have"


@pytest.mark.parametrize(
    ("tool", "param", "code"),
    [
        ({"type": "web_search", "colour": ["text"]}, "tools[0].colour", "unknown_parameter"),
        ({"type": "mcp", "server_label": "x", "connector_id": "c"}, "tools[0].connector_id", "unsupported_parameter"),
        ({"type": "function", "name": "f", "defer_loading": True}, "tools[0].defer_loading", "unsupported_parameter"),
        (
            {"type": "code_interpreter", "allowed_callers": ["programmatic"]},
            "tools[0].allowed_callers",
            "unsupported_parameter",
        ),
        (
            {"type": "namespace", "name": "crm", "tools": [{"type": "function", "name": "f", "colour": 1}]},
            "tools[0].tools[0].colour",
            "unknown_parameter",
        ),
    ],
)
def test_an_unknown_or_refused_tool_field_is_a_400_naming_it(stack, tool, param, code):
    for choice in ("auto", "none"):  # tool_choice none still checks the tools
        with pytest.raises(openai.BadRequestError) as caught:
            stack.client.responses.create(model="m", input="hi", tools=[tool], tool_choice=choice)
        assert caught.value.body["param"] == param and caught.value.body["code"] == code


def test_values_that_ask_for_nothing_pass_a_refused_field(stack):
    stack.script([], default="<|channel|>final<|message|>ok<|return|>")
    tools = [
        {"type": "web_search_preview", "search_content_types": ["text", "image"]},  # no effect: text results
        {"type": "function", "name": "f", "defer_loading": False, "allowed_callers": ["direct"], "strict": True},
    ]
    assert stack.client.responses.create(model="m", input="hi", tools=tools).output_text == "ok"
