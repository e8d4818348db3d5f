"""`truncation: "auto"`: before a turn whose prompt would not fit the model's context (`--context-tokens`),
the oldest whole items of the conversation are dropped - a message, or a call with the tool results that
answer it - until it fits. The system and developer messages (instructions, tools) and everything from the
last user message on are never dropped; a prompt that still does not fit goes to the worker as it is,
which refuses it as with `truncation: "disabled"`."""

from __future__ import annotations

import structlog
from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.responses import compaction
from orchestrator.responses.run import Run, TurnModel

log = structlog.get_logger(__name__)


async def fit(r: Run, model: TurnModel, limit: int) -> int:
    """Drop the oldest items of `r.messages` until the next prompt is at most `limit` tokens; the number of
    messages dropped."""
    head = len(compaction.head_of(r.messages))
    dropped = 0
    while (size := await model.count(r)) > limit:
        end = _oldest_item_end(r.messages, head)
        if end is None:
            log.warning("truncation.cannot_fit", prompt_tokens=size, limit=limit)
            break
        dropped += end - head
        del r.messages[head:end]
        r.turn.renderer = h.Renderer()  # the prompt no longer extends the last one
    if dropped:
        log.info("truncation.dropped", messages=dropped, limit=limit)
    return dropped


def _oldest_item_end(messages: list[Message], head: int) -> int | None:
    """Where the oldest droppable item after `head` ends (its call's tool results included); None: nothing
    before the last user message is left to drop."""
    last_user = max((i for i, m in enumerate(messages) if m.author.role == h.Role.USER), default=len(messages))
    end = head + 1
    while end < len(messages) and messages[end].author.role == h.Role.TOOL:
        end += 1
    return end if end <= last_user else None
