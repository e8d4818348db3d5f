"""Tools the client runs itself: their calls come out as items for the client, their outputs go back in."""

from __future__ import annotations

from invariants import check_stream

NAMESPACE = {
    "type": "namespace",
    "name": "crm",
    "description": "Customer records.",
    "tools": [
        {
            "type": "function",
            "name": "lookup",
            "description": "Find a customer.",
            "parameters": {"type": "object", "properties": {"email": {"type": "string"}}},
        }
    ],
}
LOOKUP = '<|channel|>commentary to=crm.lookup <|constrain|>json<|message|>{"email": "a@b.c"}<|call|>'


def test_a_namespaced_function_call_carries_its_namespace_and_its_output_comes_back_unstored(stack):
    stack.script(
        [("crm\\.lookup to=assistant.*Ada", "<|channel|>final<|message|>It is Ada.<|return|>"), ("who is", LOOKUP)]
    )
    events = list(
        stack.client.responses.create(model="m", input="who is a@b.c?", tools=[NAMESPACE], store=False, stream=True)
    )
    call = check_stream(events).output[0]
    assert (call.type, call.namespace, call.name, call.arguments) == (
        "function_call",
        "crm",
        "lookup",
        '{"email": "a@b.c"}',
    )
    assert "namespace crm {" in stack.model.encode_prompt_text(-1)  # shown to the model as one namespace
    history = [
        {"role": "user", "content": "who is a@b.c?"},
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "Ada"},
    ]
    second = stack.client.responses.create(model="m", input=history, tools=[NAMESPACE], store=False)
    assert second.output_text == "It is Ada."
    assert "<|start|>crm.lookup to=assistant" in stack.model.encode_prompt_text(-1)
