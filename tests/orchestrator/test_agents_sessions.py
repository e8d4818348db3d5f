"""The Agents SDK's server-side sessions against the orchestrator, multi-turn with a function tool:
`OpenAIConversationsSession` (the Conversations API keeps the history) and `OpenAIResponsesCompactionSession`
(`responses.compact` after each turn). The model's choices are the SCRIPTED worker's; the SDK is the real one."""

from __future__ import annotations

import asyncio

import openai
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, SQLiteSession, function_tool, set_tracing_disabled
from agents.memory import OpenAIConversationsSession, OpenAIResponsesCompactionSession

from orchestrator.harmony import encoding

CALL = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>'
RULES = [
    ("Compact this conversation", "<|channel|>final<|message|>Asked Paris weather: sunny, 21 C.<|return|>"),
    ("functions.get_weather to=assistant", "<|channel|>final<|message|>Sunny in Paris.<|return|>"),
    ("weather in Paris", CALL),
    ("and tomorrow", "<|channel|>final<|message|>Rain tomorrow.<|return|>"),
]


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny, 21 C"


def _agent(stack) -> tuple[Agent, openai.AsyncOpenAI]:
    set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key="test", max_retries=0)
    model = OpenAIResponsesModel(model="gpt-4.1", openai_client=client)
    return Agent(name="w", model=model, tools=[get_weather]), client


async def _two_turns(stack, agent: Agent, session) -> list[str]:
    first = await Runner.run(agent, "What is the weather in Paris?", session=session)
    second = await Runner.run(agent, "and tomorrow?", session=session)
    return [first.final_output, second.final_output]


@pytest.fixture
def agents_stack(stack):
    stack.script(RULES)
    return stack


def test_openai_conversations_session_runs_multi_turn_with_a_tool(agents_stack):
    stack = agents_stack
    agent, client = _agent(stack)
    session = OpenAIConversationsSession(openai_client=client)
    assert asyncio.run(_two_turns(stack, agent, session)) == ["Sunny in Paris.", "Rain tomorrow."]
    prompt = encoding().decode(stack.model.prompts[-1])
    assert prompt.index("Paris: sunny, 21 C") < prompt.index("and tomorrow")  # the first turn, tool result included
    items = stack.client.conversations.items.list(session.session_id, order="asc")
    assert [i.type for i in items][:3] == ["message", "function_call", "function_call_output"]


def test_openai_responses_compaction_session_compacts_between_turns(agents_stack, tmp_path):
    stack = agents_stack
    agent, client = _agent(stack)
    underlying = SQLiteSession("s1", str(tmp_path / "s.db"))
    session = OpenAIResponsesCompactionSession(
        "s1",
        underlying,
        client=client,
        model="gpt-4.1",
        should_trigger_compaction=lambda ctx: True,
    )
    assert asyncio.run(_two_turns(stack, agent, session)) == ["Sunny in Paris.", "Rain tomorrow."]
    prompt = encoding().decode(stack.model.prompts[-1])
    assert "Asked Paris weather" in prompt and "Paris: sunny, 21 C" not in prompt  # the summary replaced the turn
    kinds = [i.get("type") for i in asyncio.run(underlying.get_items())]
    assert "compaction" in kinds
