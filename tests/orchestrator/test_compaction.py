"""Compaction through the openai SDK: `responses.compact` and `context_management` in a response; the next
prompt shrinks (measured by `input_tokens.count` and by the worker's own prompt)."""

from __future__ import annotations

import httpx
import openai
import pytest
from invariants import check_stream
from openai.types.responses import ResponseCompactionItem
from paths import Say, User
from test_paths import on_path, scripted_chat  # noqa: F401

from orchestrator.harmony import encoding
from orchestrator.kinds.reasoning import open_reasoning

LONG = " ".join(f"fact{i} is {i * 7}." for i in range(150))  # a long user turn (~1000 tokens)
SUMMARY = "The user listed facts 0-149; fact3 is 21."
# SCRIPTED stand-in for the model: it answers, and writes SUMMARY when asked to compact the conversation.
RULES = [
    ("Compact this conversation", f"<|channel|>final<|message|>{SUMMARY}<|return|>"),
    ("what is fact3", "<|channel|>final<|message|>21.<|return|>"),
    ("written when it was compacted", "<|channel|>final<|message|>21.<|return|>"),  # the summary is last
    ("remember", "<|channel|>final<|message|>" + "Noted. " * 120 + "<|return|>"),
]


def test_compact_returns_user_messages_and_a_summary_that_shrinks_the_next_prompt(stack):
    stack.script(RULES)
    client = stack.client
    first = client.responses.create(model="m", input=f"remember: {LONG}")
    compacted = client.responses.compact(model="m", previous_response_id=first.id, input="and now?")
    assert compacted.object == "response.compaction"
    *users, item = compacted.output
    ResponseCompactionItem.model_validate(item.model_dump(mode="json", exclude_unset=True))
    assert [u.role for u in users] == ["user", "user"] and users[1].content[0].text == "and now?"
    assert SUMMARY not in item.encrypted_content  # encoded (not encrypted): not the summary in clear
    assert compacted.usage.input_tokens > 0 and compacted.usage.output_tokens > 0

    question = {"role": "user", "content": "what is fact3"}
    history = [{"role": "user", "content": f"remember: {LONG}"}, *[o.model_dump() for o in first.output]]
    full = client.responses.input_tokens.count(model="m", input=[*history, question]).input_tokens
    window = [o.model_dump(exclude_unset=True, warnings=False) for o in compacted.output]  # user messages too
    small = client.responses.input_tokens.count(model="m", input=[*window, question]).input_tokens
    after = client.responses.create(model="m", input=[*window, question], store=False)
    assert after.output_text == "21." and after.usage.input_tokens == small
    prompt = encoding().decode(stack.model.prompts[-1])
    assert SUMMARY in prompt and "Noted." not in prompt  # the summary stands in for the compacted turns
    print(f"\n[compaction] prompt tokens: full history {full}, compacted window {small}")
    assert small < full


def test_context_management_compacts_inside_a_response_past_the_threshold(stack):
    stack.script(RULES)
    client = stack.client
    first = client.responses.create(model="m", input=f"remember: {LONG}")
    plain = client.responses.input_tokens.count(model="m", input="what is fact3", previous_response_id=first.id)
    events = list(
        client.responses.create(
            model="m",
            input="what is fact3",
            previous_response_id=first.id,
            context_management=[{"type": "compaction", "compact_threshold": 500}],
            stream=True,
        )
    )
    final = check_stream(events)
    types = [e.type for e in events]
    assert types.index("response.compaction.compacting") < types.index("response.output_text.delta")
    assert [o.type for o in final.output] == ["compaction", "message"] and final.output_text == "21."
    answered = encoding().decode(stack.model.prompts[-1])
    assert SUMMARY in answered and "Noted." not in answered
    follow = client.responses.input_tokens.count(model="m", input="thanks", previous_response_id=final.id)
    print(f"\n[compaction] in-stream: prompt before {plain.input_tokens}, next prompt after {follow.input_tokens}")
    assert follow.input_tokens < plain.input_tokens
    quiet = client.responses.create(
        model="m",
        input="what is fact3",
        previous_response_id=first.id,
        context_management=[{"type": "compaction", "compact_threshold": 100_000}],
    )
    assert [o.type for o in quiet.output] == ["message"]  # under the threshold: nothing compacted


def test_compact_on_both_paths_writes_the_summary_in_a_turn_of_the_model(on_path):  # noqa: F811
    stack = on_path([(User("Compact this conversation"), Say(SUMMARY)), (User("remember"), Say("Noted."))])
    first = stack.client.responses.create(model="m", input="remember: fact3 is 21")
    compacted = stack.client.responses.compact(model="m", previous_response_id=first.id)
    assert [o.type for o in compacted.output] == ["message", "compaction"]
    assert open_reasoning(compacted.output[1].encrypted_content, "") == SUMMARY


def test_a_compaction_trigger_makes_the_response_one_compaction_item_and_continues_compacted(stack):
    """`{"type": "compaction_trigger"}` last in the input (Codex's remote compaction): the response's output is
    exactly one compaction item the model wrote, and a continuation reads the compacted context."""
    stack.script(RULES)
    client = stack.client
    first = client.responses.create(model="m", input=f"remember: {LONG}")
    trigger = [{"type": "compaction_trigger"}]
    compacted = client.responses.create(model="m", previous_response_id=first.id, input=trigger)
    assert [o.type for o in compacted.output] == ["compaction"] and compacted.status == "completed"
    assert open_reasoning(compacted.output[0].encrypted_content, "") == SUMMARY
    before = len(stack.model.prompts[-1])  # the summarising turn read the whole conversation
    answer = client.responses.create(model="m", previous_response_id=compacted.id, input="what is fact3")
    assert answer.output_text == "21." and len(stack.model.prompts[-1]) < before
    assert "Noted. Noted." not in encoding().decode(stack.model.prompts[-1])  # the long answer was summarised

    misplaced = [{"type": "compaction_trigger"}, {"role": "user", "content": "x"}]
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="m", input=misplaced)
    assert refused.value.body["param"] == "input[0]"


@pytest.mark.parametrize("body", [{"input": "hi"}, {"model": None, "input": "hi"}])
def test_compact_without_a_model_is_a_400_naming_the_field(stack, body):
    answer = httpx.post(f"{stack.url}/v1/responses/compact", json=body, timeout=30)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "model" and "'model' is required" in answer.json()["error"]["message"]
