"""Compaction: the model summarises the conversation in a turn of its own (same worker, outside the
response's items), and the context becomes the system head, the user's messages and that summary.

Used by `POST /v1/responses/compact` (the compacted window is returned to the client) and by
`context_management: [{"type": "compaction", "compact_threshold": N}]` (a response compacts its own
context before a turn whose prompt would pass N tokens, and shows a `compaction` output item).
"""

from __future__ import annotations

from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.kinds.compaction import LEAD, compaction_item, summary_message
from orchestrator.responses.events import new_id
from orchestrator.responses.run import Run, TurnModel

SUMMARY_TOKENS = 1024
PROMPT = (
    "Compact this conversation: write a summary of it so far that lets you carry on without it - the "
    "user's goals, what has been done, tool results that still matter, and what is left to do. Reply with "
    "the summary only."
)
"""The request of the summarising turn (scripted workers match on 'Compact this conversation')."""


def kept(messages: list[Message]) -> list[Message]:
    """The user's own messages (an earlier summary is folded into the new one, not kept)."""
    return [m for m in messages if m.author.role == h.Role.USER and not h.text_of(m).startswith(LEAD)]


async def summarise(r: Run, model: TurnModel, messages: list[Message]) -> str:
    return await model.aside(r, [*messages, h.user(PROMPT)], SUMMARY_TOKENS)


def head_of(messages: list[Message]) -> list[Message]:
    """The system and developer messages a conversation starts with."""
    n = next(
        (i for i, m in enumerate(messages) if m.author.role not in (h.Role.SYSTEM, h.Role.DEVELOPER)), len(messages)
    )
    return messages[:n]


async def compact_in_stream(r: Run, model: TurnModel) -> None:
    """Compact a running response's context; its output shows the compaction item (with its events)."""
    item = r.builder.add_item({"id": new_id("cmp"), "type": "compaction", "encrypted_content": ""})
    item.event("response.compaction.compacting")
    summary = await summarise(r, model, r.messages)
    sealed = compaction_item(summary)
    item.finish(None, encrypted_content=sealed["encrypted_content"], created_by=sealed["created_by"])
    head = head_of(r.messages)
    r.messages[:] = [*head, *kept(r.messages[len(head) :]), summary_message(summary)]
    r.turn.renderer = h.Renderer()  # the prompt no longer extends the last one


def window(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items as the model reads them: before the newest compaction item only the user's messages stay."""
    last = max((i for i, item in enumerate(items) if item.get("type") == "compaction"), default=None)
    if last is None:
        return items
    users = [i for i in items[:last] if i.get("type") == "message" and i.get("role") == "user"]
    return users + items[last:]


def user_item(msg: Message) -> dict[str, Any]:
    return {
        "id": new_id("msg"),
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_text", "text": h.text_of(msg)}],
    }
