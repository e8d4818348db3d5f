"""Responses WebSocket mode through the openai SDK's `responses.connect()`: responses one after another on one
socket, continuation (stored and `store: false`), `generate: false`, error events, keys on the upgrade."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
from invariants import check_stream

from orchestrator.harmony import encoding

KEY = "sk-ws-a"
# SCRIPTED stand-in for the model: one answer per question.
RULES = [
    ("first", "<|channel|>final<|message|>One.<|return|>"),
    ("second", "<|channel|>final<|message|>Two.<|return|>"),
    ("slow", "<|channel|>final<|message|>" + "tick " * 40 + "<|return|>"),
]


async def _one(conn, **create) -> list:
    """Send one response.create and collect its events up to the terminal one (or an error event)."""
    await conn.response.create(model="m", **create)
    events = []
    async for event in conn:
        events.append(event)
        if event.type in ("response.completed", "response.failed", "response.incomplete", "error"):
            return events
    raise AssertionError("the socket closed before a terminal event")


def test_two_responses_with_continuation_on_one_socket_stored_and_unstored(make_stack):
    stack = make_stack(api_keys=[KEY])
    stack.script(RULES)
    client = openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key=KEY, max_retries=0)

    async def main() -> None:
        async with client.responses.connect() as conn:
            first = check_stream(await _one(conn, input="first", stream=True))  # implicit; Codex sends it
            second = check_stream(await _one(conn, input="second", previous_response_id=first.id))
            assert (first.output_text, second.output_text) == ("One.", "Two.")
            prompt = encoding().decode(stack.model.prompts[-1])
            assert prompt.index("first") < prompt.index("One.") < prompt.index("second")
            loose = check_stream(await _one(conn, input="first", store=False))
            kept = check_stream(await _one(conn, input="second", previous_response_id=loose.id, store=False))
            assert kept.output_text == "Two." and "One." in encoding().decode(stack.model.prompts[-1])
            warm = check_stream(await _one(conn, input="first", generate=False))
            assert warm.output == [] and warm.usage.input_tokens > 0
            after_warm = check_stream(await _one(conn, input="second", previous_response_id=warm.id))
            assert after_warm.output_text == "Two."

            refused = await _one(conn, input="x", previous_response_id="resp_missing")
            assert refused[-1].type == "error" and refused[-1].status == 404
            refused = await _one(conn, input="x", prompt={"id": "pmpt_1"})  # refused over HTTP, so here too
            assert refused[-1].type == "error" and (refused[-1].status, refused[-1].error.param) == (400, "prompt")
            await conn.send_raw(json.dumps({"type": "response.create", "model": "m", "input": "x", "colour": 1}))
            unknown = await conn.recv()
            assert unknown.type == "error" and (unknown.error.code, unknown.error.param) == (
                "unknown_parameter",
                "colour",
            )
            await conn.response.create(model="m", input="slow")
            await conn.response.create(model="m", input="second")  # while the first still runs
            events = []
            async for event in conn:
                events.append(event)
                if event.type == "response.completed":
                    break
            errors = [e for e in events if e.type == "error"]
            assert len(errors) == 1 and errors[0].error.code == "response_in_progress"
            check_stream([e for e in events if e.type != "error"])
        with pytest.raises(openai.NotFoundError):  # store=false responses live only as long as their socket
            await client.responses.retrieve(loose.id)

    stack.model.scenario.token_delay_s = 0.02
    asyncio.run(main())


def test_the_upgrade_checks_the_key(make_stack):
    stack = make_stack(api_keys=[KEY])
    client = openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key="sk-wrong", max_retries=0)

    async def main() -> None:
        with pytest.raises(Exception) as refused:
            async with client.responses.connect() as conn:
                await _one(conn, input="first")
        assert "401" in str(refused.value)

    asyncio.run(main())


def test_steering_is_refused_with_its_input_returned_and_the_running_response_unchanged(make_stack):
    """`response.steer` (openai 3.60's `conn.response.steer`) is not built: OpenAI's own refusal comes back
    (`response.steer.failed`, `steering_not_supported`) with the input, and the running response goes on."""
    stack = make_stack(api_keys=[KEY])
    stack.script(RULES)
    client = openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key=KEY, max_retries=0)

    async def main() -> None:
        async with client.responses.connect() as conn:
            await conn.response.create(model="m", input="slow")
            events = []
            async for event in conn:
                events.append(event)
                if event.type == "response.created":
                    await conn.response.steer(input="be brief", previous_response_id=event.response.id)
                if event.type == "response.completed":
                    break
        failed = [e for e in events if e.type == "response.steer.failed"]
        assert len(failed) == 1 and failed[0].error.code == "steering_not_supported"
        assert (failed[0].steer.input, failed[0].steer.previous_response_id) == ("be brief", events[0].response.id)
        done = check_stream([e for e in events if e.type != "response.steer.failed"])
        assert done.output_text.startswith("tick") and "be brief" not in encoding().decode(stack.model.prompts[-1])

    stack.model.scenario.token_delay_s = 0.02
    asyncio.run(main())
