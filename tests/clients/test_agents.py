"""The OpenAI Agents SDK (PyPI `openai-agents`) against the fleet, on its defaults: the SDK's default model
and settings, function tools, streaming. The scripted worker stands in for the model's choices."""

from __future__ import annotations

from tests.clients.conftest import run_python

WEATHER_CALL = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
RULES = [
    ("functions\\.get_weather to=assistant.*sunny in Paris", "<|channel|>final<|message|>Sunny in Paris.<|return|>"),
    ("weather in Paris", "<|channel|>analysis<|message|>A tool knows.<|end|><|start|>assistant" + WEATHER_CALL),
]

DEFAULT_AGENT = """
import asyncio, json
from agents import Agent, Runner, function_tool

@function_tool
def get_weather(city: str) -> str:
    "The weather of a city."
    return f"It is sunny in {city}."

agent = Agent(name="assistant", instructions="Be brief.", tools=[get_weather])

async def main():
    result = await Runner.run(agent, "What is the weather in Paris?")
    streamed = Runner.run_streamed(agent, "What is the weather in Paris?")
    kinds = [e.type async for e in streamed.stream_events()]
    items = [i.type for i in result.new_items]
    print(json.dumps({"final": result.final_output, "streamed": streamed.final_output, "items": items,
                      "events": sorted(set(kinds))}))

asyncio.run(main())
"""


def test_an_agent_on_the_sdk_defaults_calls_a_function_tool_streaming_and_not(clients, fleet):
    fleet.script(RULES)
    got = run_python(clients, DEFAULT_AGENT, f"{fleet.url}/v1")
    assert got["final"] == got["streamed"] == "Sunny in Paris."
    assert got["items"] == ["reasoning_item", "tool_call_item", "tool_call_output_item", "message_output_item"]
    assert {"raw_response_event", "run_item_stream_event"} <= set(got["events"])
