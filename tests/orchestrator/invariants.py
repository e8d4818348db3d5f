"""Checks every stream must pass: SDK shapes, numbering, pairing, indices, one terminal event."""

from __future__ import annotations

from typing import Any

from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

_EVENT = TypeAdapter(ResponseStreamEvent)
TERMINAL = {"response.completed", "response.failed", "response.incomplete"}


def check_stream(events: list[Any]) -> Response:
    """`events` as the SDK yields them; returns the final response."""
    dicts = [
        e.model_dump(mode="json", exclude_unset=True, by_alias=True) if hasattr(e, "model_dump") else e for e in events
    ]
    for d in dicts:
        _validate(d)  # strict shapes, not the SDK lenient construct
    assert [d["sequence_number"] for d in dicts] == list(range(len(dicts)))
    assert dicts[0]["type"] == "response.created"
    assert dicts[1]["type"] in ("response.in_progress", "response.queued")
    terminals = [d for d in dicts if d["type"] in TERMINAL]
    assert len(terminals) == 1 and dicts[-1] is terminals[0]
    open_items: dict[int, str] = {}
    done_items: dict[int, dict] = {}
    parts: set[tuple[int, int]] = set()
    for d in dicts:
        t = d["type"]
        if t == "response.output_item.added":
            idx = d["output_index"]
            assert idx not in open_items and idx not in done_items and idx == len(open_items) + len(done_items)
            open_items[idx] = d["item"]["id"]
        elif t == "response.output_item.done":
            idx = d["output_index"]
            assert open_items.pop(idx) == d["item"]["id"]
            assert not any(p[0] == idx for p in parts), "content part left open"
            done_items[idx] = d["item"]
        elif t == "response.content_part.added":
            parts.add((d["output_index"], d["content_index"]))
        elif t == "response.content_part.done":
            parts.remove((d["output_index"], d["content_index"]))
        elif "item_id" in d and "output_index" in d:
            assert open_items.get(d["output_index"]) == d["item_id"], f"{t} for an item not open"
    assert not open_items, "items added but never done"
    for d in dicts:
        if d["type"].count(".") == 1 and "response" in d:
            check_completed_at(d["response"])
    final = Response.model_validate(terminals[0]["response"])
    assert [o.model_dump(mode="json", exclude_unset=True)["id"] for o in final.output] == [
        done_items[i]["id"] for i in range(len(done_items))
    ]
    return final


def check_completed_at(body: dict) -> None:
    """`completed_at` is in every snapshot (the open Responses spec): null until completed, a unix time after."""
    assert "completed_at" in body, f"completed_at missing from a {body.get('status')} snapshot"
    if body["status"] == "completed":
        assert isinstance(body["completed_at"], int | float) and body["completed_at"] >= body["created_at"]
    else:
        assert body["completed_at"] is None


def _validate(d: dict) -> None:
    from openai.types import responses as R

    try:
        _EVENT.validate_python(d)
    except Exception:
        name = "Response" + "".join(w.capitalize() for w in d["type"].split(".")[1:]) + "Event"
        model = getattr(R, name, None)
        if model is None:
            raise
        model.model_validate(d)  # a readable error for the one type it should be
        raise
