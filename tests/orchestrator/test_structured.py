"""`text.format`: the answer is written under the worker's structured decoding, while reasoning stays free.

The scripted workers cannot constrain anything: these tests check what the orchestrator asks of the worker
(`structured_outputs` with the final channel prefilled; `response_format` on the chat path) and the item
stream; `test_vllm_worker.py` / `test_vllm_chat_worker.py` prove the constraint on real vLLM workers."""

from __future__ import annotations

import openai
import pytest
from invariants import check_stream

from orchestrator.worker.scripted import ChatScenario, ScriptedChatModel, build_chat_app
from tests.support.asgi import serve_asgi

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
FORMAT = {"format": {"type": "json_schema", "name": "place", "schema": SCHEMA, "strict": True}}
PROSE = (
    "<|channel|>analysis<|message|>Paris, surely.<|end|><|start|>assistant<|channel|>final<|message|>Paris!<|return|>"
)


def test_a_json_schema_answer_is_written_again_under_the_constraint_after_free_reasoning(stack):
    stack.script([("final<\\|message\\|>$", '{"city": "Paris"}<|return|>'), ("where", PROSE)])
    events = list(stack.client.responses.create(model="m", input="where?", text=FORMAT, stream=True))
    resp = check_stream(events)
    assert [o.type for o in resp.output] == ["reasoning", "message"] and resp.output_text == '{"city": "Paris"}'
    assert resp.text.format.type == "json_schema" and resp.text.format.schema_ == SCHEMA  # echoed
    free, constrained = list(stack.model.options)[-2:]
    assert "structured_outputs" not in free and constrained["structured_outputs"] == {"json": SCHEMA}
    assert stack.model.encode_prompt_text(-1).endswith(
        "Paris, surely.<|end|><|start|>assistant<|channel|>final<|message|>"
    )


def test_json_object_is_constrained_too_and_a_malformed_format_is_a_400(stack):
    stack.script([("final<\\|message\\|>$", '{"ok": true}<|return|>'), ("go", PROSE)])
    resp = stack.client.responses.create(model="m", input="go", text={"format": {"type": "json_object"}})
    assert resp.output_text == '{"ok": true}' and stack.model.options[-1]["structured_outputs"] == {"json_object": True}
    with pytest.raises(openai.BadRequestError) as caught:
        stack.client.responses.create(model="m", input="go", text={"format": {"type": "json_schema", "name": "x"}})
    assert caught.value.body["param"] == "text.format.schema"


def test_the_chat_path_sends_the_format_as_response_format(make_stack):
    model = ScriptedChatModel(ChatScenario.from_dict({"default": {"reasoning": "Hm.", "content": '{"city": "Rome"}'}}))
    with serve_asgi(build_chat_app(model)) as url:
        stack = make_stack(worker_urls=[url])
        resp = stack.client.responses.create(model="m", input="where?", text=FORMAT)
    assert resp.output_text == '{"city": "Rome"}'
    sent = model.requests[-1]["response_format"]
    assert sent == {"type": "json_schema", "json_schema": {"name": "place", "schema": SCHEMA, "strict": True}}
