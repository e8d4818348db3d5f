"""`reasoning` items: the model's analysis channel, and its `encrypted_content` for stateless clients."""

from __future__ import annotations

import base64
import binascii
import zlib
from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.errors import RequestError
from orchestrator.kinds.base import EchoContext, Kind, Stream
from orchestrator.kinds.message import content_text
from orchestrator.responses.events import new_id
from orchestrator.responses.run import Run

_SEAL = "tfr1."


class ReasoningStream(Stream):
    delta_event = None  # reasoning deltas carry a content index

    def __init__(self, r: Run) -> None:
        item = r.builder.add_item(
            {"id": new_id("rs"), "type": "reasoning", "summary": [], "content": [], "status": "in_progress"}
        )
        super().__init__(r, item)
        item.event("response.content_part.added", content_index=0, part={"type": "reasoning_text", "text": ""})

    def delta(self, text: str, lp: Any = None) -> None:
        if text:
            self.item.event("response.reasoning_text.delta", content_index=0, delta=text)

    def close(self, msg: Message | None, *, complete: bool = True) -> None:
        item, text = self.item, h.text_of(msg) if msg is not None else ""
        item.event("response.reasoning_text.done", content_index=0, text=text)
        part = {"type": "reasoning_text", "text": text}
        item.event("response.content_part.done", content_index=0, part=part)
        sealed = {"encrypted_content": seal_reasoning(text)} if "reasoning.encrypted_content" in self.r.include else {}
        item.finish("completed" if complete else "incomplete", content=[part], **sealed)


class ReasoningKind(Kind):
    echoes = ("reasoning",)

    def open(self, r: Run) -> ReasoningStream:
        return ReasoningStream(r)

    def echo(self, item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
        text = content_text(item.get("content") or [], f"{where}.content")
        if not text and isinstance(item.get("encrypted_content"), str):
            text = open_reasoning(item["encrypted_content"], f"{where}.encrypted_content")
        text = text or "".join(s.get("text", "") for s in item.get("summary") or [])
        return [h.assistant(text, "analysis")]


def seal_reasoning(text: str) -> str:
    """`reasoning.encrypted_content`: the reasoning text, compressed and encoded so a stateless client
    (store=false) can send it back. Not encrypted: gpt-oss reasoning is returned in clear anyway."""
    return _SEAL + base64.urlsafe_b64encode(zlib.compress(text.encode())).decode()


def open_reasoning(value: str, where: str) -> str:
    if not value.startswith(_SEAL):
        raise RequestError("encrypted_content was not produced by this server", where)
    try:
        return zlib.decompress(base64.urlsafe_b64decode(value[len(_SEAL) :])).decode()
    except (binascii.Error, zlib.error, UnicodeDecodeError, ValueError):
        raise RequestError("encrypted_content is corrupt", where) from None
