"""Issue 32, finding 6: every request body is bounded per route as it arrives, and conversations are bounded.

A declared size over the route's limit is a 413 before a byte of the body is read; a chunked body is a 413
as soon as its count passes the limit; nothing over the limit is ever accepted, on any route. A conversation
holds at most `--max-conversation-items` items and `--max-conversation-bytes` of JSON (400 naming the bound).
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.security.input_stack import Stack, chunks, json_of_size, orchestrator, send

LIMIT = 64 * 1024
FILE_LIMIT = 32 * 1024
ITEMS, CONVERSATION_BYTES = 6, 32 * 1024
JSON_ROUTES = [
    "/v1/responses",
    "/v1/responses/input_tokens",
    "/v1/responses/compact",
    "/v1/conversations",
    "/v1/conversations/{conv}",
    "/v1/conversations/{conv}/items",
    "/v1/chat/completions",
    "/v1/containers",
]
TWO_GIB = str(2 << 30)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with orchestrator(
        max_body_bytes=LIMIT,
        max_file_bytes=FILE_LIMIT,
        max_conversation_items=ITEMS,
        max_conversation_bytes=CONVERSATION_BYTES,
    ) as started:
        yield started


@pytest.fixture(scope="module")
def conv(stack: Stack) -> str:
    return stack.client.conversations.create().id


@pytest.mark.parametrize("route", [*JSON_ROUTES, "/v1/files"])
def test_a_declared_size_over_the_limit_is_refused_before_the_body_is_sent(stack: Stack, conv: str, route: str):
    """Only the headers go out: the 413 must come without the server waiting for a body (it got no answer)."""
    answer = send(stack.port, "POST", route.format(conv=conv), headers={"content-length": TWO_GIB})
    assert answer.status == 413
    assert answer.error["type"] == "invalid_request_error" and "larger than" in answer.error["message"]


def test_a_chunked_body_is_stopped_once_its_count_passes_the_limit(stack: Stack):
    """64 MiB offered in chunks: the 413 comes back while the body is still being sent."""
    sent = []

    def body() -> Iterator[bytes]:
        for chunk in chunks(json_of_size(64 << 20), 64 * 1024):
            sent.append(len(chunk))
            yield chunk

    answer = send(stack.port, "POST", "/v1/conversations", body())
    assert answer.status == 413 and answer.error["code"] == "request_too_large"
    assert sum(sent) < 64 << 20  # answered before the end: the server did not read it all first


SIZES = st.one_of(st.integers(LIMIT - 64, LIMIT + 64), st.integers(16, 3 * LIMIT))


@settings(max_examples=60, deadline=None)
@given(route=st.sampled_from(JSON_ROUTES), size=SIZES, chunked=st.booleans())
def test_every_json_route_refuses_exactly_the_bodies_over_its_limit(
    stack: Stack, conv: str, route: str, size: int, chunked: bool
):
    """Declared or chunked: over the limit a 413, within it the route's own answer (a 400 for the unknown
    field), never a 5xx and never accepted."""
    body = json_of_size(size)
    answer = send(stack.port, "POST", route.format(conv=conv), chunks(body) if chunked else body)
    assert answer.status == (413 if size > LIMIT else 400), (answer.status, answer.body[:200])


@settings(max_examples=20, deadline=None)
@given(
    size=st.one_of(st.integers(FILE_LIMIT - 8, FILE_LIMIT + 8), st.integers(0, 4 * FILE_LIMIT)), chunked=st.booleans()
)
def test_an_upload_is_refused_exactly_when_its_file_passes_the_file_limit(stack: Stack, size: int, chunked: bool):
    head = b'--b\r\nContent-Disposition: form-data; name="file"; filename="x"\r\n\r\n'
    body = head + b"z" * size + b"\r\n--b--\r\n"  # no purpose: a 400 when the size is fine
    headers = {"content-type": "multipart/form-data; boundary=b"}
    answer = send(stack.port, "POST", "/v1/files", chunks(body) if chunked else body, headers=headers)
    assert answer.status == (413 if size > FILE_LIMIT else 400) and answer.error["param"] in ("file", "purpose")


def _items(n: int, text: str = "hi") -> list[dict]:
    return [{"type": "message", "role": "user", "content": text} for _ in range(n)]


def test_a_conversation_holds_at_most_its_item_bound(stack: Stack):
    client = stack.client
    made = client.conversations.create(items=_items(4))
    with pytest.raises(openai.BadRequestError) as refused:
        client.conversations.items.create(made.id, items=_items(3))
    assert refused.value.body["param"] == "items" and refused.value.body["code"] == "conversation_too_large"
    assert f"at most {ITEMS} items" in refused.value.message
    assert len(client.conversations.items.list(made.id).data) == 4  # nothing of the refused call was kept
    client.conversations.items.create(made.id, items=_items(2))  # up to the bound is fine


def test_a_conversation_holds_at_most_its_byte_bound(stack: Stack):
    client = stack.client
    made = client.conversations.create(items=_items(1, "a" * (CONVERSATION_BYTES // 2)))
    with pytest.raises(openai.BadRequestError) as refused:
        client.conversations.items.create(made.id, items=_items(1, "b" * (CONVERSATION_BYTES // 2)))
    assert refused.value.body["code"] == "conversation_too_large" and f"at most {CONVERSATION_BYTES} bytes" in (
        refused.value.message
    )


def test_a_response_may_not_grow_a_conversation_past_its_bound(stack: Stack):
    stack.script([("", "<|channel|>final<|message|>Done.<|return|>")])
    client = stack.client
    made = client.conversations.create(items=_items(5))
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="m", conversation=made.id, input=_items(2))
    assert refused.value.body["param"] == "input" and refused.value.body["code"] == "conversation_too_large"
    assert len(client.conversations.items.list(made.id).data) == 5
