"""Responses API input items as `GET /v1/responses/{id}/input_items` lists them (each kind echoes its own
items into Harmony messages: `kinds.to_messages`)."""

from __future__ import annotations

from typing import Any

from orchestrator.errors import RequestError
from orchestrator.responses.events import new_id


def normalize(input_: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The input as a list of items with ids, as `GET /v1/responses/{id}/input_items` lists them."""
    items = [{"type": "message", "role": "user", "content": input_}] if isinstance(input_, str) else input_
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RequestError("each input item must be an object", f"input[{i}]")
        item = dict(item)
        if "type" not in item and "role" in item:
            item["type"] = "message"
        if item.get("type") == "message" and isinstance(item.get("content"), str):
            kind = "output_text" if item.get("role") == "assistant" else "input_text"
            item["content"] = [{"type": kind, "text": item["content"]}]
        item.setdefault("id", new_id({"message": "msg"}.get(item.get("type", ""), "item")))
        out.append(item)
    return out
