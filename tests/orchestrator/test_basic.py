"""Messages, reasoning and function calls through the official SDK, streaming and not."""

from __future__ import annotations

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
