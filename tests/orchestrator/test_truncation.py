"""`truncation: "auto"` against a small model context (`context_tokens`): the oldest whole items go first
(a function call with its output), the instructions and the last user turn stay; "disabled" keeps all."""

from __future__ import annotations

from test_basic import WEATHER_TOOL

OLD = "an old question about nothing much " * 20
CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'}
HISTORY = [
    {"role": "user", "content": OLD},
    CALL,
    {"type": "function_call_output", "call_id": "call_1", "output": "rain in Oslo"},
    {"role": "assistant", "content": "It rains in Oslo."},
    {"role": "user", "content": "and tomorrow?"},
]
REQUEST = {"model": "m", "instructions": "Be brief.", "tools": [WEATHER_TOOL]}


def _sizes(stack) -> tuple[int, int]:
    """(tokens of the whole prompt, tokens with nothing but the instructions, tools and last user turn)."""
    count = stack.client.responses.input_tokens.count
    return count(**REQUEST, input=HISTORY).input_tokens, count(**REQUEST, input=HISTORY[-1:]).input_tokens


def test_auto_drops_the_oldest_whole_items_until_the_prompt_fits(make_stack):
    whole, least = _sizes(make_stack())
    just_under = make_stack(context_tokens=whole - 1)
    just_under.script([], default="<|channel|>final<|message|>Sun.<|return|>")
    response = just_under.client.responses.create(**REQUEST, input=HISTORY, truncation="auto")
    prompt = just_under.model.encode_prompt_text(-1)
    assert response.truncation == "auto" and response.output_text == "Sun."
    assert "an old question" not in prompt and "rain in Oslo" in prompt  # only the oldest item went
    assert response.usage.input_tokens <= whole - 1
    counted = just_under.client.responses.input_tokens.count(**REQUEST, input=HISTORY, truncation="auto")
    assert counted.input_tokens == response.usage.input_tokens  # the count drops what the response drops

    tight = make_stack(context_tokens=least)
    tight.script([], default="<|channel|>final<|message|>Sun.<|return|>")
    tight.client.responses.create(**REQUEST, input=HISTORY, truncation="auto")
    prompt = tight.model.encode_prompt_text(-1)
    assert "get_weather to=" not in prompt and "rain in Oslo" not in prompt  # the call went with its output
    assert "It rains" not in prompt and "Be brief." in prompt and "and tomorrow?" in prompt


def test_disabled_and_a_prompt_that_fits_keep_every_item(make_stack):
    whole, _ = _sizes(make_stack())
    stack = make_stack(context_tokens=whole)
    stack.script([], default="<|channel|>final<|message|>Sun.<|return|>")
    for truncation in ("auto", "disabled"):
        response = stack.client.responses.create(**REQUEST, input=HISTORY, truncation=truncation)
        assert response.truncation == truncation and "an old question" in stack.model.encode_prompt_text(-1)
    small = make_stack(context_tokens=10)
    small.script([], default="<|channel|>final<|message|>Sun.<|return|>")
    small.client.responses.create(**REQUEST, input=HISTORY)  # disabled: sent whole, the worker's to refuse
    assert "an old question" in small.model.encode_prompt_text(-1)
