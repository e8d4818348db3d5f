"""The Conversations API through the openai SDK: routes, pagination, ownership, responses that read and extend
a conversation, tool state that follows it, two Redis replicas sharing one, one response at a time in one."""

from __future__ import annotations

import asyncio
import uuid

import openai
import pytest
from invariants import check_stream
from openai.types.conversations import Conversation, ConversationItem, ConversationItemList
from openai.types.responses import Response
from pydantic import TypeAdapter

from orchestrator.harmony import encoding
from orchestrator.persist.redis import RedisStores
from orchestrator.persist.sqlite import SQLiteStores

ITEM = TypeAdapter(ConversationItem)
KEY_A, KEY_B = "sk-conv-a", "sk-conv-b"
PY_CALL = "<|channel|>analysis to=python<|message|>x = 6 * 7\nprint(x)<|call|>"
PY_AGAIN = "<|channel|>analysis to=python<|message|>print(x + 1)<|call|>"
# SCRIPTED stand-in for the model (its rules read the prompt's last message; the whole prompt is checked apart).
SECOND = ("second question", "<|channel|>final<|message|>Answer two.<|return|>")
FIRST = ("first question", "<|channel|>final<|message|>Answer one.<|return|>")


def _last_prompt(stack) -> str:
    return encoding().decode(stack.model.prompts[-1])


def _strict(page) -> list[dict]:
    """A page of items, each validated strictly against the SDK's ConversationItem (not its lenient construct)."""
    data = page.model_dump(mode="json", exclude_unset=True)
    ConversationItemList.model_validate(data)
    for item in data["data"]:
        ITEM.validate_python(item)
    return data["data"]


def _keyed(make_stack, **extra):
    stack = make_stack(api_keys=[KEY_A, KEY_B], **extra)
    a = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=KEY_A, max_retries=0, timeout=30)
    b = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=KEY_B, max_retries=0, timeout=30)
    return stack, a, b


def test_conversation_routes_round_trip_with_pagination_and_another_keys_404(make_stack):
    _, a, b = _keyed(make_stack)
    texts = [f"note {i}" for i in range(5)]
    conv = a.conversations.create(
        items=[{"type": "message", "role": "user", "content": texts[0]}], metadata={"topic": "demo"}
    )
    Conversation.model_validate(conv.model_dump(mode="json"))
    assert conv.id.startswith("conv_") and conv.metadata == {"topic": "demo"}
    added = a.conversations.items.create(
        conv.id, items=[{"type": "message", "role": "user", "content": t} for t in texts[1:]]
    )
    assert [i.content[0].text for i in added.data] == texts[1:]
    assert a.conversations.update(conv.id, metadata={"topic": "changed"}).metadata == {"topic": "changed"}
    assert a.conversations.retrieve(conv.id).metadata == {"topic": "changed"}

    first = a.conversations.items.list(conv.id, limit=2, order="asc")
    assert [i["content"][0]["text"] for i in _strict(first)] == texts[:2] and first.has_more
    walked = [i.content[0].text for i in a.conversations.items.list(conv.id, limit=2, order="asc")]
    assert walked == texts  # the SDK's auto-pagination follows `after`
    newest = a.conversations.items.list(conv.id, limit=1)  # default order: newest first
    assert newest.data[0].content[0].text == texts[-1]
    one = a.conversations.items.retrieve(first.data[1].id, conversation_id=conv.id)
    assert one.id == first.data[1].id

    for call in (  # another key: exactly what a missing id answers, on every route
        lambda c: c.conversations.retrieve(conv.id),
        lambda c: c.conversations.update(conv.id, metadata={}),
        lambda c: c.conversations.items.list(conv.id),
        lambda c: c.conversations.items.retrieve(one.id, conversation_id=conv.id),
        lambda c: c.conversations.items.create(conv.id, items=[{"role": "user", "content": "x"}]),
        lambda c: c.conversations.items.delete(one.id, conversation_id=conv.id),
        lambda c: c.conversations.delete(conv.id),
        lambda c: c.responses.create(model="gpt-oss", input="hi", conversation=conv.id),
    ):
        with pytest.raises(openai.NotFoundError) as theirs:
            call(b)
        assert theirs.value.body["code"] == "not_found" and theirs.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError) as missing:
        a.conversations.retrieve("conv_" + "0" * 32)
    assert missing.value.body["message"].replace("0" * 32, "ID") == theirs.value.body["message"].replace(
        conv.id.removeprefix("conv_"), "ID"
    )

    assert a.conversations.items.delete(one.id, conversation_id=conv.id).id == conv.id
    assert len(list(a.conversations.items.list(conv.id))) == 4
    with pytest.raises(openai.BadRequestError) as bad:  # a function output with no call to answer
        a.conversations.items.create(conv.id, items=[{"type": "function_call_output", "call_id": "c9", "output": "1"}])
    assert bad.value.body["param"].startswith("items[0]")
    with pytest.raises(openai.BadRequestError) as twice:
        a.conversations.items.create(conv.id, items=[{"id": first.data[0].id, "role": "user", "content": "again"}])
    assert twice.value.body["param"] == "items[0].id"
    with pytest.raises(openai.BadRequestError):
        a.conversations.create(extra_body={"colour": "blue"})  # nothing accepted and ignored
    assert a.conversations.delete(conv.id).deleted
    with pytest.raises(openai.NotFoundError):
        a.conversations.retrieve(conv.id)


def test_a_response_in_a_conversation_reads_its_turns_and_leaves_its_items_there(stack):
    stack.script([SECOND, FIRST])
    client = stack.client
    conv = client.conversations.create()
    one = client.responses.create(model="gpt-oss", input="first question", conversation=conv.id)
    assert one.output_text == "Answer one." and one.conversation.id == conv.id
    events = list(
        client.responses.create(model="gpt-oss", input="second question", conversation={"id": conv.id}, stream=True)
    )
    two = check_stream(events)
    prompt = _last_prompt(stack)  # the earlier turn was rendered before the new input
    assert prompt.index("first question") < prompt.index("Answer one.") < prompt.index("second question")
    assert two.usage.input_tokens > one.usage.input_tokens
    items = _strict(client.conversations.items.list(conv.id, order="asc"))
    assert [(i["type"], i.get("role")) for i in items] == [("message", "user"), ("message", "assistant")] * 2
    assert items[3]["id"] == two.output[0].id and items[1]["content"][0]["text"] == "Answer one."
    client.responses.create(model="gpt-oss", input="second question")
    assert "first question" not in _last_prompt(stack)  # the same input without the conversation: no history

    with pytest.raises(openai.BadRequestError) as both:
        client.responses.create(model="gpt-oss", input="x", conversation=conv.id, previous_response_id=one.id)
    assert both.value.body["param"] == "conversation"


def test_python_state_follows_the_conversation(stack):
    stack.script(
        [
            ("<\\|start\\|>python to=assistant.*42", "<|channel|>final<|message|>It is 42.<|return|>"),
            ("<\\|start\\|>python to=assistant.*43", "<|channel|>final<|message|>Then 43.<|return|>"),
            ("again", PY_AGAIN),
            ("compute", PY_CALL),
        ]
    )
    conv = stack.client.conversations.create()
    tools = [{"type": "code_interpreter", "container": {"type": "auto"}}]
    stack.client.responses.create(model="gpt-oss", input="compute", conversation=conv.id, tools=tools)
    second = stack.client.responses.create(model="gpt-oss", input="again", conversation=conv.id, tools=tools)
    Response.model_validate(second.model_dump(mode="json"))
    assert second.output[0].outputs[0].logs == "43\n"  # x survived: the conversation carries the python session
    kinds = [i["type"] for i in _strict(stack.client.conversations.items.list(conv.id, order="asc"))]
    assert kinds.count("code_interpreter_call") == 2


def test_a_conversation_created_on_one_redis_replica_is_read_and_continued_on_another(make_stack, redis_url):
    prefix = f"c{uuid.uuid4().hex[:8]}:"
    a = make_stack(store="redis", redis_url=redis_url, redis_prefix=prefix)
    b = make_stack(store="redis", redis_url=redis_url, redis_prefix=prefix)
    a.script([SECOND, FIRST])
    conv = a.client.conversations.create(metadata={"k": "v"})
    a.client.responses.create(model="gpt-oss", input="first question", conversation=conv.id)
    assert b.client.conversations.retrieve(conv.id).metadata == {"k": "v"}
    assert b.client.responses.create(model="gpt-oss", input="second question", conversation=conv.id).output_text
    assert "Answer one." in _last_prompt(b)
    assert len(_strict(a.client.conversations.items.list(conv.id))) == 4
    assert b.client.conversations.delete(conv.id).deleted
    with pytest.raises(openai.NotFoundError):
        a.client.conversations.retrieve(conv.id)


SLOW = {"match": "slow question", "reply": "<|channel|>final<|message|>" + "tick " * 30 + "<|return|>", "delay_s": 0.03}


def test_a_second_response_in_a_running_conversation_is_refused_on_another_redis_replica(make_stack, redis_url):
    """As on OpenAI: while one response runs in a conversation, another is a 400 `conversation_locked`
    (before: both read the items as they were and appended in finishing order), on any replica."""
    prefix = f"c{uuid.uuid4().hex[:8]}:"
    a = make_stack(store="redis", redis_url=redis_url, redis_prefix=prefix)
    b = make_stack(store="redis", redis_url=redis_url, redis_prefix=prefix)
    a.script([SLOW, SECOND])
    conv = a.client.conversations.create()
    stream = a.client.responses.create(model="gpt-oss", input="slow question", conversation=conv.id, stream=True)
    events = [next(iter(stream))]  # response.created: the first response holds the conversation
    with pytest.raises(openai.BadRequestError) as locked:
        b.client.responses.create(model="gpt-oss", input="second question", conversation=conv.id)
    assert (locked.value.body["code"], locked.value.body["param"]) == ("conversation_locked", "conversation")
    with pytest.raises(openai.BadRequestError):  # the same replica too, and over its own stream
        a.client.responses.create(model="gpt-oss", input="second question", conversation=conv.id, stream=True)
    check_stream(events + list(stream))
    second = b.client.responses.create(model="gpt-oss", input="second question", conversation=conv.id)
    assert second.output_text == "Answer two." and "tick tick" in _last_prompt(b)  # it saw the whole first turn
    items = _strict(a.client.conversations.items.list(conv.id, order="asc"))
    assert [i["content"][0]["text"][:4] for i in items] == ["slow", "tick", "seco", "Answ"]


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_a_conversation_lease_is_one_holders_until_released_or_lapsed(backend, request, tmp_path):
    """The backends' lease: taken when free, refused to another token, extended by its holder, freed by its
    holder only, and taken over once a holder that stopped renewing (a dead replica) lets it lapse."""
    if backend == "redis":
        stores = RedisStores(request.getfixturevalue("redis_url"), prefix=f"l{uuid.uuid4().hex[:8]}:")
    else:
        stores = SQLiteStores(str(tmp_path / "leases.sqlite3"))
    store = stores.conversations

    async def main() -> None:
        try:
            await leases()
        finally:
            await stores.aclose()

    async def leases() -> None:
        assert await store.hold("conv_1", "one", 30)
        assert not await store.hold("conv_1", "two", 30)
        assert await store.hold("conv_1", "one", 30) and await store.hold("conv_2", "two", 30)
        await store.release("conv_1", "two")  # not its holder: nothing happens
        assert not await store.hold("conv_1", "two", 30)
        await store.release("conv_1", "one")
        assert await store.hold("conv_1", "two", 0.05)
        await asyncio.sleep(0.2)  # the holder stopped renewing
        assert await store.hold("conv_1", "three", 30)

    asyncio.run(main())
