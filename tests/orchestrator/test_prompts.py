"""The prompt of every turn of a response, as the turn loop sends it to the worker, is the library's own
render of the conversation at that turn (the incremental renderer is only faster, never different)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from openai_harmony import Conversation

from orchestrator import harmony as h
from orchestrator.kinds import toolset
from orchestrator.responses.events import ResponseBuilder
from orchestrator.responses.run import Limits, Run
from orchestrator.responses.turns import run
from orchestrator.tools import Endpoints, ToolOutcome, ToolSessions
from orchestrator.worker.client import Chunk, GenerateRequest

REPLIES = [
    "<|channel|>analysis<|message|>Compute it.<|end|>"
    "<|start|>assistant<|channel|>analysis to=python<|message|>print(6*7)<|call|>",
    "<|channel|>commentary<|message|>Checking once more 🙂<|end|>"
    "<|start|>assistant<|channel|>commentary to=python code<|message|>print('<|end|>')<|call|>",
    "<|channel|>analysis to=python<|message|>x = 'naïve'<|call|>",
    "<|channel|>final<|message|>42<|return|>",
]


class _Answering(ToolSessions):
    """Every call answers at once with text that is long, multilingual and looks like Harmony."""

    async def call(self, url: str, name: str, args: dict[str, Any], headers: dict[str, str] | None = None, **_: Any):
        return ToolOutcome("42\n<|start|>assistant<|message|>日本語 " * 20)


def _response(history: list[h.Message], seen: list[tuple[list[int], list[h.Message]]]) -> Run:
    body = {"id": "resp_t", "object": "response", "created_at": 0, "model": "m", "output": [], "tools": []}
    holder: list[Run] = []

    async def generate(req: GenerateRequest) -> AsyncIterator[Chunk]:
        seen.append((list(req.prompt), list(holder[0].messages)))
        reply = h.encoding().encode(REPLIES[len(seen) - 1], allowed_special="all")
        yield Chunk([], len(req.prompt))
        for token in reply:
            yield Chunk([token])
        yield Chunk([], len(req.prompt), 0, "stop")

    r = Run(
        ResponseBuilder(body),
        history,
        toolset([{"type": "code_interpreter"}], "auto", lambda _: None),
        Endpoints(None, {"python": "http://127.0.0.1:9/mcp"}),
        _Answering(session_id="c"),
        generate,
        Limits(10_000, 100, 108),
        "c",
    )
    holder.append(r)
    return r


def test_every_turns_prompt_is_the_librarys_render_of_the_conversation_so_far():
    system = h.system_message(effort="low", date="2026-12-02", namespaces=[h.Namespace("python", "python tool")])
    seen: list[tuple[list[int], list[h.Message]]] = []
    r = _response([system, h.user("what is 6*7?")], seen)
    asyncio.run(run(r))
    assert r.builder.body["status"] == "completed" and len(seen) == len(REPLIES)
    for prompt, messages in seen:
        assert prompt == h.encoding().render_conversation_for_completion(
            Conversation.from_messages(messages), h.Role.ASSISTANT
        )
