"""`message` items: the model's final answer (its `output_text`, logprobs, url_citation and file_citation
annotations), and client messages of any role sent as input."""

from __future__ import annotations

from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.errors import RequestError
from orchestrator.kinds.base import EchoContext, Kind, Stream
from orchestrator.kinds.file_search import cite as cite_files
from orchestrator.kinds.web_search import cite as cite_web
from orchestrator.request.attachments import image_marker
from orchestrator.responses.events import new_id
from orchestrator.responses.run import Run
from orchestrator.worker.client import TokenLogprob

HOLD_LIMIT = 64  # characters; a citation marker is shorter, so longer held text is sent as it is


class MessageStream(Stream):
    def __init__(self, r: Run) -> None:
        item = r.builder.add_item(
            {"id": new_id("msg"), "type": "message", "role": "assistant", "status": "in_progress", "content": []}
        )
        super().__init__(r, item)
        self.logprobs: list[dict[str, Any]] = []  # output_text logprobs, when include asks for them
        self.pending: list[tuple[int, TokenLogprob]] = []  # tokens whose text has not shown yet (split UTF-8)
        self.closing = False
        self.held = ""  # text from a `【` that may open a citation, sent once it is rewritten (`cite`)
        item.event(
            "response.content_part.added",
            content_index=0,
            part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
        )

    def delta(self, text: str, lp: TokenLogprob | None = None) -> None:
        if lp is not None:
            self.pending.append((self.r.turn.last_token, lp))
        text = self._release(text)
        if not text:
            return
        entries: list[dict[str, Any]] = []
        if self.r.logprobs is not None:
            entries = [_logprob(t, x, self.r.logprobs) for t, x in self.pending]
            self.logprobs += entries
            self.pending = []
        self.item.event(
            "response.output_text.delta",
            content_index=0,
            delta=text,
            logprobs=[_without_bytes(e) for e in entries],
        )

    def _release(self, text: str) -> str:
        """The text that can be sent now, citations rewritten; a possible citation's start is held back."""
        text, self.held = self.held + text, ""
        start = text.rfind("【")
        if start < 0:
            return text  # no citation in it (`cite` would give it back as it is), the common delta
        if "】" not in text[start:] and len(text) - start < HOLD_LIMIT and not self.closing:
            text, self.held = text[:start], text[start:]
        return cited(self.r, text)[0]

    def close(self, msg: Message | None, *, complete: bool = True) -> None:
        self.closing = True
        self.delta("")  # what was held back
        item = self.item
        text, found = cited(self.r, h.text_of(msg)) if msg is not None else ("", [])
        if self.r.workspaces:  # files the tools wrote, where the answer names them
            found += [a for space in self.r.workspaces.values() for a in space.citations(text)]
        found.sort(key=lambda a: a.get("start_index", a.get("index", 0)))
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": self.logprobs}
        for i, ann in enumerate(found):
            part["annotations"].append(ann)
            item.event("response.output_text.annotation.added", content_index=0, annotation_index=i, annotation=ann)
        item.event(
            "response.output_text.done",
            content_index=0,
            text=text,
            logprobs=[_without_bytes(e) for e in self.logprobs],
        )
        item.event("response.content_part.done", content_index=0, part=part)
        item.finish("completed" if complete else "incomplete", content=[part])


class MessageKind(Kind):
    echoes = ("message",)

    def open(self, r: Run) -> MessageStream:
        return MessageStream(r)

    def echo(self, item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
        role = item.get("role")
        text = content_text(item.get("content"), f"{where}.content", images=role == "user")
        if role == "user":
            return [h.user(text)]
        if role == "assistant":
            return [h.assistant(text, "final")]
        if role in ("system", "developer"):
            return [Message.from_role_and_content(h.Role.DEVELOPER, text)]
        raise RequestError(f"unknown message role {role!r}", f"{where}.role")


def cited(r: Run, text: str) -> tuple[str, list[dict[str, Any]]]:
    """The answer as the client reads it, with its annotations: web citations become links, file_search
    markers are removed (`web_search.cite`, `file_search.cite`)."""
    text, urls = cite_web(r, text)
    text, files = cite_files(r, text, urls)
    return text, urls + files


def content_text(content: Any, where: str, *, images: bool = False) -> str:
    """The text of a message's (or reasoning item's) content: a string or a list of text parts (`images`: and
    `input_image` parts, as their markers; whether the model may be sent them is decided by `prepare`)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError("message content must be a string or a list of parts", where)
    parts = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text", "reasoning_text"):
            parts.append(str(part.get("text", "")))
        elif isinstance(part, dict) and part.get("type") == "refusal":
            parts.append(str(part.get("refusal", "")))
        elif images and isinstance(part, dict) and part.get("type") == "input_image":
            parts.append(image_marker(part, where))
        else:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise RequestError(f"content part type {kind!r} is not supported by this model", where)
    return "".join(parts)


def _logprob(token: int, lp: TokenLogprob, top_n: int) -> dict[str, Any]:
    """An output_text logprob: the sampled token (decoded here, from its id) and the worker's `top_n` best."""
    text = h.encoding().decode([token])
    top = [{"token": t, "bytes": list(t.encode()), "logprob": v} for t, v in lp.top[:top_n]]
    return {"token": text, "bytes": list(text.encode()), "logprob": lp.logprob, "top_logprobs": top}


def _without_bytes(entry: dict[str, Any]) -> dict[str, Any]:
    """The same logprob as the delta/done events carry it (no bytes)."""
    top = [{"token": t["token"], "logprob": t["logprob"]} for t in entry["top_logprobs"]]
    return {"token": entry["token"], "logprob": entry["logprob"], "top_logprobs": top}
