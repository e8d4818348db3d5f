"""`item_reference` input items: resolved to the caller's own stored items (input and output) and to the
items of the conversation the request continues; an id of another key, or of nothing, is a 400 naming it."""

from __future__ import annotations

import openai
import pytest
from test_access_keys import KEY_A, KEY_B, keyed, sdk


def test_references_stand_for_a_stored_responses_input_and_output_items(stack):
    stack.script(
        [
            ("second question", "<|channel|>final<|message|>Second answer.<|return|>"),
            ("first question", "<|channel|>final<|message|>First answer.<|return|>"),
        ]
    )
    first = stack.client.responses.create(model="m", input="first question")
    asked = stack.client.responses.input_items.list(first.id).data[0]
    refs = [{"type": "item_reference", "id": asked.id}, {"id": first.output[0].id}]  # the type is optional
    second = stack.client.responses.create(model="m", input=[*refs, {"role": "user", "content": "second question"}])
    assert second.output_text == "Second answer."
    prompt = stack.model.encode_prompt_text(-1)
    assert prompt.index("first question") < prompt.index("First answer.") < prompt.index("second question")
    listed = stack.client.responses.input_items.list(second.id, order="asc").data
    assert [i.id for i in listed[:2]] == [asked.id, first.output[0].id] and listed[1].role == "assistant"


def test_a_reference_to_a_conversation_item_resolves_in_that_conversation_only(stack):
    stack.script([], default="<|channel|>final<|message|>Blue.<|return|>")
    conv = stack.client.conversations.create(items=[{"type": "message", "role": "user", "content": "I like blue."}])
    ref = {"type": "item_reference", "id": stack.client.conversations.items.list(conv.id).data[0].id}
    with pytest.raises(openai.BadRequestError) as err:  # outside the conversation: no stored response has it
        stack.client.responses.create(model="m", input=[ref])
    assert err.value.body["param"] == "input[0].id"
    stack.client.responses.create(model="m", conversation=conv.id, input=[ref])
    assert stack.model.encode_prompt_text(-1).count("I like blue.") == 2  # the history, then the reference


def test_an_unknown_id_or_another_keys_item_is_a_400_naming_the_input_item(make_stack):
    stack = keyed(make_stack)
    stack.script([], default="<|channel|>final<|message|>ok<|return|>")
    theirs = sdk(stack, KEY_A).responses.create(model="m", input="secret")
    mine = sdk(stack, KEY_B)
    for item_id in (theirs.output[0].id, "msg_nope"):
        with pytest.raises(openai.BadRequestError) as err:
            mine.responses.create(model="m", input=[{"type": "item_reference", "id": item_id}])
        assert err.value.body["param"] == "input[0].id" and item_id in err.value.message
    assert (
        sdk(stack, KEY_A)
        .responses.create(model="m", input=[{"type": "item_reference", "id": theirs.output[0].id}])
        .output_text
        == "ok"
    )
