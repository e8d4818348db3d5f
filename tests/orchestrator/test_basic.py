"""Messages, reasoning and function calls through the official SDK, streaming and not."""

from __future__ import annotations

from invariants import check_stream
from openai.types.responses import Response

REASON_AND_ANSWER = (
    "<|channel|>analysis<|message|>The user greets me.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello there!<|return|>"
)


def test_plain_answer_has_reasoning_then_message_and_usage(stack):
    stack.script([("hello", REASON_AND_ANSWER)])
    resp = stack.client.responses.create(model="gpt-oss", input="hello")
    Response.model_validate(resp.model_dump())
    assert resp.status == "completed"
    assert [o.type for o in resp.output] == ["reasoning", "message"]
    assert resp.output[0].content[0].text == "The user greets me."
    assert resp.output_text == "Hello there!"
    assert resp.usage.output_tokens > 0 and resp.usage.input_tokens > 0
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens


WEATHER_CALL = (
    "<|channel|>analysis<|message|>Need weather.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city":"Paris"}<|call|>'
)
WEATHER_ANSWER = "<|channel|>final<|message|>It is 21C in Paris.<|return|>"
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def test_streamed_answer_passes_every_stream_invariant(stack):
    stack.script([("hello", REASON_AND_ANSWER)])
    events = list(stack.client.responses.create(model="gpt-oss", input="hello", stream=True))
    final = check_stream(events)
    assert final.status == "completed" and final.output_text == "Hello there!"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "Hello there!"
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert reasoning == "The user greets me."


def test_function_call_ends_the_turn_and_its_output_continues_the_chain(stack):
    stack.script([("functions.get_weather to=assistant", WEATHER_ANSWER), ("weather", WEATHER_CALL)])
    first = stack.client.responses.create(model="gpt-oss", input="weather in Paris?", tools=[WEATHER_TOOL])
    call = first.output[-1]
    assert call.type == "function_call" and call.name == "get_weather" and call.arguments == '{"city":"Paris"}'
    second = stack.client.responses.create(
        model="gpt-oss",
        previous_response_id=first.id,
        tools=[WEATHER_TOOL],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": '{"temp": 21}'}],
    )
    assert second.output_text == "It is 21C in Paris."
    prompt = stack.model.encode_prompt_text(-1)
    assert '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{"temp": 21}<|end|>' in prompt
    assert "Need weather." in prompt  # analysis before the call stays until a final answer


def test_streamed_function_call_arguments_arrive_as_deltas(stack):
    stack.script([("weather", WEATHER_CALL)])
    events = list(stack.client.responses.create(model="gpt-oss", input="weather?", tools=[WEATHER_TOOL], stream=True))
    final = check_stream(events)
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert deltas == '{"city":"Paris"}' and final.output[-1].type == "function_call"


def test_instructions_and_effort_reach_the_prompt(stack):
    stack.client.responses.create(
        model="gpt-oss", input="hi", instructions="Answer in French.", reasoning={"effort": "high"}
    )
    prompt = stack.model.encode_prompt_text(-1)
    assert "Answer in French." in prompt and "Reasoning: high" in prompt and "2026-12-02" in prompt


def test_stored_response_can_be_read_listed_and_deleted(stack):
    resp = stack.client.responses.create(model="gpt-oss", input="hi", metadata={"k": "v"})
    again = stack.client.responses.retrieve(resp.id)
    assert again.id == resp.id and again.output_text == resp.output_text and again.metadata == {"k": "v"}
    items = stack.client.responses.input_items.list(resp.id)
    assert [i.type for i in items.data] == ["message"] and items.data[0].content[0].text == "hi"
    stack.client.responses.delete(resp.id)
    import openai
    import pytest

    with pytest.raises(openai.NotFoundError):
        stack.client.responses.retrieve(resp.id)


def test_unstored_response_is_not_kept(stack):
    import openai
    import pytest

    resp = stack.client.responses.create(model="gpt-oss", input="hi", store=False)
    with pytest.raises(openai.NotFoundError):
        stack.client.responses.retrieve(resp.id)


def test_models_lists_the_workers_model(stack):
    assert [m.id for m in stack.client.models.list().data] == ["scripted-gpt-oss"]


def test_max_output_tokens_is_a_budget_for_the_whole_response(stack):
    stack.script([], default="<|channel|>final<|message|>" + "word " * 50 + "<|return|>")
    resp = stack.client.responses.create(model="gpt-oss", input="hi", max_output_tokens=10)
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    assert resp.usage.output_tokens == 10


def test_each_turn_extends_the_previous_prompt_so_the_prefix_cache_hits(stack):
    from orchestrator import harmony as h

    call = "<|channel|>analysis to=python<|message|>print(1)<|call|>"
    stack.script([("python to=assistant", "<|channel|>final<|message|>done<|return|>"), ("go", call)])
    resp = stack.client.responses.create(model="gpt-oss", input="go", tools=[{"type": "code_interpreter"}])
    first, second = list(stack.model.prompts)[-2:]
    assert second[: len(first)] == first  # no re-tokenization drift between turns
    assert resp.usage.input_tokens_details.cached_tokens >= len(first)
    assert resp.usage.output_tokens_details.tool_output_tokens > 0
    # the incremental prompt equals a full render of the same conversation
    text = h.encoding().decode(second)
    assert text.endswith("<|start|>assistant") and "<|start|>python to=assistant" in text


def test_demo_scenario_file_loads_and_drives_a_python_turn(stack):
    from pathlib import Path

    import orchestrator.worker
    from orchestrator.worker.scripted import Scenario

    path = Path(orchestrator.worker.__file__).parent / "scenarios" / "demo.yaml"
    stack.model.scenario = Scenario.load(path)
    resp = stack.client.responses.create(
        model="gpt-oss", input="please compute 6*7", tools=[{"type": "code_interpreter"}]
    )
    assert [o.type for o in resp.output] == ["reasoning", "code_interpreter_call", "message"]
    assert resp.output[1].outputs[0].logs == "42\n"
