"""Issue 32, finding 7: a request's size drives CPU off the event loop, never on it.

Rendering and counting a prompt encode its text with tiktoken (which releases the GIL; Harmony's own encoder
holds it) in a worker thread once the text is large, so other requests are served meanwhile. The prompt is
built message by message; these tests hold it to the library's own rendering, token for token.
"""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_harmony import Conversation, Role

from orchestrator import harmony as h
from tests.security.input_stack import Stack, _read_answer, orchestrator, send

WORDS = 2_400_000  # ~12 MB of text, as in the issue


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with orchestrator() as started:
        yield started


def _answer_waiting(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def test_healthz_keeps_answering_while_a_big_prompt_is_counted(stack: Stack):
    """The count's request goes out whole first; then health probes, one after another, until the count's
    answer is there. With the render on the loop, no probe is answered while it runs: only the few that fit
    between the body's last bytes arriving and the render starting (the issue saw 1.45 s with no answer)."""
    body = json.dumps({"model": "m", "input": "word " * WORDS}).encode()
    head = (
        f"POST /v1/responses/input_tokens HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", stack.port), timeout=60) as big:
        big.sendall(head.encode() + body)
        answered = 0
        while not _answer_waiting(big):
            assert send(stack.port, "GET", "/healthz").status == 200
            answered += 1
        counted = _read_answer(big)
    assert counted.status == 200 and counted.json()["input_tokens"] > WORDS
    assert answered >= 50, f"only {answered} health probes were answered while the prompt was counted"


TEXTS = st.lists(
    st.one_of(
        st.characters(codec="utf-8", exclude_categories=["Cs"]),
        st.sampled_from(["<|end|>", "<|start|>", "<|call|>", " ", "\n", "'s", "  "]),
    ),
    max_size=40,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(TEXTS)
def test_text_is_encoded_as_the_library_encodes_it(text: str):
    assert h.encode_text(text) == h.encoding().encode(text, allowed_special=set(), disallowed_special=())


KINDS = st.sampled_from(["user", "final", "analysis", "call", "tool", "developer"])


def _message(kind: str, text: str):
    match kind:
        case "user":
            return h.user(text)
        case "final" | "analysis":
            return h.assistant(text, kind)
        case "call":
            return h.assistant(json.dumps({"q": text}), "commentary", "functions.f", "<|constrain|>json")
        case "tool":
            return h.tool_result("functions.f", text)
    return h.developer_message(text or "be brief", [])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(KINDS, TEXTS), max_size=8), st.sampled_from([None, "low", "high"]))
def test_the_prompt_is_rendered_as_the_library_renders_it(turns: list[tuple[str, str]], effort: str | None):
    messages = [h.system_message(effort=effort, date="2026-12-02", namespaces=[])]
    messages += [_message(kind, text) for kind, text in turns]
    library = h.encoding().render_conversation_for_completion(Conversation.from_messages(messages), Role.ASSISTANT)
    assert h.render(messages) == library
