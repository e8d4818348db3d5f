"""The response object and its streaming events, built together so they can never disagree.

Every change to the response goes through `ResponseBuilder`, which numbers events from 0, keeps each
`*.added` paired with its `*.done`, and emits exactly one terminal event. An output item is written only
through the `Item` handle `add_item` returns (its events, its fields, its status, its one `done`). Live
readers follow the event log (`follow`), which is also what `GET /v1/responses/{id}?stream=true` replays.
A background response's builder is write-ahead: readers see an event only once its journal stored it
(`publish`, `responses/journal.py`), so no client holds an event another replica could number otherwise.
"""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

TERMINAL = {"response.completed", "response.failed", "response.incomplete"}


_ATOMS = frozenset((str, int, float, bool, type(None)))


def json_copy(value: Any) -> Any:
    """A deep copy of JSON-shaped data, for the events that must not change when the item does later.

    `copy.deepcopy` keeps a memo for shared and cyclic objects, which a response body never has, and costs
    several times as much; a value of any other type is still copied by it.
    """
    kind = type(value)
    if kind is dict:
        return {k: json_copy(v) for k, v in value.items()}
    if kind is list:
        return [json_copy(v) for v in value]
    if kind in _ATOMS:
        return value
    return copy.deepcopy(value)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponseBuilder:
    """One response: its JSON body (as OpenAI shapes it) and the ordered events that built it."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.events: list[dict[str, Any]] = []
        self._changed = asyncio.Event()
        self._open: dict[int, str] = {}  # output_index -> item id, for items added and not yet done
        self._parts: dict[int, dict[str, Any]] = {}  # a restored builder's open content parts (text so far)
        self.finished = False
        self.left = False  # another replica goes on with it: readers end at what was stored (`leave`)
        self.visible = 0  # events readers may have: every one, or (write-ahead) those stored
        self.write_ahead = False
        self._emitted = asyncio.Event()  # the journal's signal: events to store

    @property
    def id(self) -> str:
        return self.body["id"]

    @property
    def output(self) -> list[dict[str, Any]]:
        return self.body["output"]

    def emit(self, type_: str, **fields: Any) -> dict[str, Any]:
        if self.finished:
            raise RuntimeError(f"event {type_} after the terminal event")
        event = {"type": type_, "sequence_number": len(self.events), **fields}
        self.events.append(event)
        if self.write_ahead:
            self._emitted.set()
        else:
            self.publish(len(self.events))
        return event

    def leave(self) -> None:
        """This replica stops the response unfinished and another goes on with it: its readers end after the
        events they may have, and a client resumes there (`starting_after`)."""
        self.left = True
        self.publish(self.visible)

    def publish(self, upto: int) -> None:
        """Readers may have the events before `upto` (write-ahead: they are stored)."""
        self.visible = upto
        self._changed.set()
        self._changed = asyncio.Event()

    async def unstored(self, stored: int) -> None:
        """Wait until there are events past the first `stored` (the journal's next batch)."""
        while len(self.events) <= stored:
            self._emitted.clear()
            await self._emitted.wait()

    def snapshot(self) -> dict[str, Any]:
        return json_copy(self.body)

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self, *, queued: bool = False) -> None:
        self.body["status"] = "queued" if queued else "in_progress"
        self.emit("response.created", response=self.snapshot())
        if queued:
            self.emit("response.queued", response=self.snapshot())

    def in_progress(self) -> None:
        self.body["status"] = "in_progress"
        self.emit("response.in_progress", response=self.snapshot())

    def finish(
        self,
        status: str,
        *,
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
        incomplete_reason: str | None = None,
    ) -> None:
        """Close whatever is open, then the single terminal event."""
        self.close_open()
        self.body["status"] = status
        self.body["completed_at"] = int(time.time()) if status == "completed" else None
        if usage is not None:
            self.body["usage"] = usage
        self.body["error"] = error
        self.body["incomplete_details"] = {"reason": incomplete_reason} if incomplete_reason else None
        event = {"completed": "response.completed", "failed": "response.failed"}.get(status, "response.incomplete")
        self.emit(event, response=self.snapshot())
        self.finished = True

    def close_open(self) -> None:
        """Every item still open ends cut short: text `incomplete`, a call `failed`."""
        for index, part in sorted(self._parts.items()):  # a restored builder's text, cut where it was
            kind, where = part["type"], {"output_index": index, "item_id": self.output[index]["id"], "content_index": 0}
            extra = {"logprobs": []} if kind == "output_text" else {}
            self.emit(f"response.{kind}.done", **where, text=part["text"], **extra)
            self.emit("response.content_part.done", **where, part=json_copy(part))
            self.output[index]["content"] = [part]
        self._parts.clear()
        for index in sorted(self._open):
            item = self.output[index]
            item["status"] = "incomplete" if item.get("type") in ("message", "reasoning") else "failed"
            self._done_item(index)

    def open_call(self) -> bool:
        """Whether a tool call's item is still open: its call is in flight."""
        return any(self.output[i].get("type") not in ("message", "reasoning") for i in self._open)

    @classmethod
    def restore(cls, body: dict[str, Any], events: list[dict[str, Any]]) -> ResponseBuilder:
        """A stored response's builder, rebuilt from its event log (a GET on another replica, an adoption):
        the body's fields from the last event that carries the response, its output from the items' events
        (`_replay`); open items are those added and not yet done, so the next event is numbered after the
        stored ones."""
        builder = cls(json_copy(body))
        builder.events = list(events)
        builder.visible = len(events)
        if events:  # an old record's body without its events is taken as it is
            builder.body["output"] = []
        for event in events:
            builder._replay(event)
        builder.finished = bool(events) and events[-1]["type"] in TERMINAL
        return builder

    def _replay(self, event: dict[str, Any]) -> None:
        """One stored event applied again. Within an item still open, a `*.done` event sets the fields it
        names that the item has (a call's `arguments`, `code`, `input`), and `response.<type>.<word>` of an
        item of that type sets its status (`searching`, `interpreting`); content parts keep their text."""
        kind, index = event["type"], event.get("output_index", -1)
        if isinstance(event.get("response"), dict):
            self.body.update({k: json_copy(v) for k, v in event["response"].items() if k != "output"})
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = json_copy(event["item"])
            if index == len(self.output):
                self.output.append(item)
            else:
                self.output[index] = item
            if kind.endswith("added"):
                self._open[index] = item["id"]
            else:
                self._open.pop(index, None)
        elif kind == "response.content_part.added":
            self._parts[index] = json_copy(event["part"])
        elif kind == "response.content_part.done":
            self._parts.pop(index, None)
        elif kind in ("response.output_text.delta", "response.reasoning_text.delta") and index in self._parts:
            self._parts[index]["text"] += event["delta"]
        elif index in self._open:
            _fold(self.output[index], kind, event)

    # --- output items ----------------------------------------------------------------------------

    def add_item(self, item: dict[str, Any]) -> Item:
        """Append an item (`output_item.added`); the returned handle is its only writer from then on."""
        index = len(self.output)
        self.output.append(item)
        self._open[index] = item["id"]
        self.emit("response.output_item.added", output_index=index, item=json_copy(item))
        return Item(self, index)

    def _done_item(self, index: int) -> None:
        self._open.pop(index, None)
        self.emit("response.output_item.done", output_index=index, item=json_copy(self.output[index]))

    # --- readers ---------------------------------------------------------------------------------

    async def follow(self, starting_after: int = -1) -> AsyncIterator[dict[str, Any]]:
        """Every event after `starting_after`, waiting for new ones until the terminal event."""
        position = starting_after + 1
        while True:
            while position < self.visible:
                event = self.events[position]
                position += 1
                yield event
                if event["type"] in TERMINAL:
                    return
            if (self.finished and position >= len(self.events)) or (self.left and position >= self.visible):
                return
            await self._changed.wait()


_NOT_FIELDS = frozenset(("type", "sequence_number", "output_index", "item_id", "content_index"))


def _fold(item: dict[str, Any], kind: str, event: dict[str, Any]) -> None:
    """What an open item's own event tells of it (`ResponseBuilder._replay`)."""
    prefix, _, word = kind.rpartition(".")
    if word == "done":
        item.update({k: json_copy(v) for k, v in event.items() if k in item and k not in _NOT_FIELDS})
    elif prefix == f"response.{item.get('type')}" and word != "delta" and "status" in item:
        item["status"] = word


class Item:
    """One output item while it is written: its events carry its index (and id), `update` sets its fields,
    `finish` sets its status and sends its `output_item.done`, once."""

    def __init__(self, builder: ResponseBuilder, index: int) -> None:
        self._builder, self.index = builder, index
        self._data: dict[str, Any] = builder.output[index]
        self.id: str = self._data["id"]  # read once: an item's id never changes, and events name it per token

    @property
    def status(self) -> str | None:
        return self._data.get("status")

    def get(self, field: str) -> Any:
        return self._data.get(field)

    @property
    def open(self) -> bool:
        """Added and not yet done (for items without a status, such as `custom_tool_call`)."""
        return self.index in self._builder._open

    def event(self, type_: str, **fields: Any) -> None:
        """An event of this item (`output_index` and `item_id` filled in)."""
        self._builder.emit(type_, output_index=self.index, item_id=self.id, **fields)

    def indexed_event(self, type_: str, **fields: Any) -> None:
        """An event that names the item by `output_index` alone (the shell_call_command events)."""
        self._builder.emit(type_, output_index=self.index, **fields)

    def update(self, **fields: Any) -> None:
        self._data.update(fields)

    def finish(self, status: str | None, event: str | None = None, **fields: Any) -> None:
        """Set the final fields and status (None: an item without one, an approval request), send `event`
        (e.g. `*.completed`) if any, then `output_item.done`."""
        self._data.update(fields)
        if status is not None:
            self._data["status"] = status
        if event is not None:
            self.event(event)
        self._builder._done_item(self.index)


def usage(*, input_tokens: int, output_tokens: int, cached: int, reasoning: int, tool_output: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning, "tool_output_tokens": tool_output},
        "total_tokens": input_tokens + output_tokens,
    }
