"""`compaction` items: a summary of earlier turns that the model wrote itself, carried in `encrypted_content`
(compressed and encoded like reasoning, NOT encrypted). Sent back as input, the item renders as that summary.

A `compaction_trigger` input item (last in the input) asks the response to compact now and do nothing else
(Codex's remote compaction): it renders as nothing, and `is_triggered` tells the service to compact."""

from __future__ import annotations

from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.errors import RequestError
from orchestrator.kinds.base import EchoContext, Kind
from orchestrator.kinds.reasoning import open_reasoning, seal_reasoning
from orchestrator.responses.events import new_id

LEAD = "Summary of the earlier conversation, written when it was compacted:\n"
"""How the summary is shown to the model: a user-turn note ahead of the turns kept after it."""


def compaction_item(summary: str) -> dict[str, Any]:
    return {
        "id": new_id("cmp"),
        "type": "compaction",
        "encrypted_content": seal_reasoning(summary),
        "created_by": "toolfleet",
    }


def summary_message(summary: str) -> Message:
    return h.user(LEAD + summary)


class CompactionKind(Kind):
    echoes = ("compaction",)

    def echo(self, item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
        sealed = item.get("encrypted_content")
        if not isinstance(sealed, str):
            raise RequestError("a compaction item needs its encrypted_content", f"{where}.encrypted_content")
        return [summary_message(open_reasoning(sealed, f"{where}.encrypted_content"))]


class CompactionTriggerKind(Kind):
    """The trigger is an instruction to the server, not context for the model: it renders as nothing."""

    echoes = ("compaction_trigger",)

    def echo(self, item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
        return []


def is_triggered(items: list[dict[str, Any]]) -> bool:
    """True when the input ends with a `compaction_trigger`; one anywhere else is a 400, as OpenAI's is."""
    at = [i for i, item in enumerate(items) if item.get("type") == "compaction_trigger"]
    if any(i != len(items) - 1 for i in at):
        raise RequestError("a compaction_trigger must be the final input item", f"input[{at[0]}]")
    return bool(at)
