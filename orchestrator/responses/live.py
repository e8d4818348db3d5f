"""A response while it runs (`Live`), and every way to read or manage one, live on this replica or stored
(retrieve, replay, input-items pages, cancel, delete, a caller waiting or streaming): the half of the
service that follows responses rather than making them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog

from orchestrator.conversations import Lease
from orchestrator.errors import RequestError
from orchestrator.guard.limits import Slot
from orchestrator.persist import Conversation, Record, Store
from orchestrator.request.schema import ResponsesRequest
from orchestrator.responses.checkpoint import Checkpoints
from orchestrator.responses.events import TERMINAL, ResponseBuilder

log = structlog.get_logger(__name__)

RUNNING = ("queued", "in_progress")
CANCEL_WAIT_S = 15.0
REPLAY_POLL_S = 0.25  # a stream of a response running on another replica follows its log in the shared store


@dataclass
class Live:
    """A response while it runs: its builder, its task, and what the HTTP status should be if it fails."""

    builder: ResponseBuilder
    request: ResponsesRequest
    owner: str
    task: asyncio.Task[None] | None = None
    conversation: Conversation | None = None  # the Conversations API's, when the request named one
    lease: Lease | None = None  # its hold on that conversation, released once settled
    slot: Slot | None = None  # its place in the key's running limit, given back once settled
    kept: dict[str, Record] | None = None  # a WebSocket connection's newest response, to continue from
    record: Record | None = None  # what it left, once settled
    http_status: int = 200
    error_code: str | None = None  # for the HTTP error body; response.error.code is OpenAI's fixed set
    unsaved: str | None = None  # why a response that finished could not be stored or added to its conversation
    checkpoint: Checkpoints | None = None  # a background response's record as it runs, and its hold
    cut_call: bool = False  # cancelled with a tool call in flight: its tool sessions are ended, killing that work
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def failure(self) -> ResponseFailed | None:
        """The HTTP error a non-streaming caller gets for a failed response (None: it did not fail that way);
        partial output, if any, stays readable with GET when stored."""
        if self.unsaved is not None:
            return ResponseFailed(self.unsaved, None, 503, "store_unavailable")
        if self.http_status == 200:
            return None
        b = self.builder
        message = (b.body.get("error") or {}).get("message") or "the response failed"
        if self.request.store:
            message += f" (response {b.id} is stored with status {b.body['status']})"
        return ResponseFailed(message, None, self.http_status, self.error_code)


def unsaved_event(live: Live) -> dict[str, Any]:
    """The stream's `error` event for a response that finished but was not kept (the SDK's ResponseErrorEvent)."""
    sequence = len(live.builder.events)
    return {
        "type": "error",
        "sequence_number": sequence,
        "code": "store_unavailable",
        "message": live.unsaved,
        "param": None,
    }


class ResponseFailed(RequestError):
    """A response that failed on our side (worker unavailable or broken, a crash): the non-streaming answer."""

    etype = "server_error"


class LiveResponses:
    """The responses this replica runs (`live`, the service's) and the shared store, read and managed by id and
    owner; `adopt` takes over a stored one whose replica stopped (`adopt.Adopter`)."""

    def __init__(self, live: dict[str, Live], store: Store, adopt: Callable[[str], Awaitable[None]]) -> None:
        self.live, self.store, self.adopt = live, store, adopt

    async def find(self, rid: str, owner: str) -> tuple[Live | None, Record | None]:
        """The live response or the stored record `owner` created; 404 for any other key (no existence oracle)."""
        live = self.live.get(rid)
        if live is not None and live.request.store and live.owner == owner:
            return live, None
        record = None if live is not None else await self.store.get(rid)
        if record is None or record.owner != owner:
            raise RequestError(f"response {rid!r} not found", "response_id", 404, "not_found")
        record = await self._unless_orphaned(record)
        adopted = self.live.get(rid)
        return (adopted, None) if adopted is not None else (None, record)

    async def _unless_orphaned(self, record: Record) -> Record:
        """A stored background response still running whose hold lapsed (its replica stopped: killed, its node
        lost): adopted here, first reader first, or stored ended if it cannot go on (`adopt.Adopter`)."""
        if record.body.get("status") not in RUNNING or await self.store.is_held(record.id):
            return record
        await self.adopt(record.id)
        return await self.store.get(record.id) or record

    async def result(self, live: Live, gone: Callable[[], Awaitable[None]]) -> dict[str, Any] | None:
        """A non-streaming response's body once it ends; None when the caller went away first (`gone`
        returned): the generation is cancelled. A response that failed on our side raises `ResponseFailed`."""
        if not await _first(live.done.wait(), gone()):
            log.info("response.client_gone", response_id=live.builder.id)
            if live.task and not live.task.done():
                live.task.cancel()  # the client went away: abort the generation
            await live.done.wait()
            return None
        if (failure := live.failure()) is not None:
            raise failure
        return live.builder.body

    async def stream(self, live: Live) -> AsyncIterator[dict[str, Any]]:
        """A streaming response's events; a caller that stops reading a foreground one cancels it."""
        try:
            async for event in live.builder.follow():
                yield event
            await live.done.wait()  # the stream ends once the response is stored and its conversation has its items
            if live.unsaved is not None:  # after the terminal event: the one way left to tell a streaming caller
                yield unsaved_event(live)
        finally:
            if not live.request.background and live.task and not live.task.done() and not live.builder.finished:
                live.task.cancel()  # the client went away: abort the generation (not the settling after it)

    async def retrieve(self, rid: str, owner: str) -> dict[str, Any]:
        live, record = await self.find(rid, owner)
        if live is not None:
            return live.builder.snapshot()
        if record.body.get("status") in RUNNING:  # running elsewhere: as far as its stored events tell
            return ResponseBuilder.restore(record.body, record.events).body
        return record.body

    async def replay(self, rid: str, owner: str, starting_after: int) -> AsyncIterator[dict[str, Any]]:
        """The events after `starting_after`: live ones, or stored ones (for a response running on another
        replica, followed through the store until it is stored finished)."""
        live, record = await self.find(rid, owner)
        return live.builder.follow(starting_after) if live is not None else self._stored_events(record, starting_after)

    async def _stored_events(self, record: Record, starting_after: int) -> AsyncIterator[dict[str, Any]]:
        """The stored events, then those its replica appends to its log as the response goes on elsewhere
        (`journal.py`), gapless across an adoption, to the terminal event; once this replica runs it, its own."""
        position = starting_after + 1
        events = record.events[position:]
        while True:
            for event in events:
                yield event
                if event["type"] in TERMINAL:
                    return
            position += len(events)
            if record.body.get("status") not in RUNNING:
                return  # a stored response's whole log was read
            if (live := self.live.get(record.id)) is not None:  # adopted here
                async for event in live.builder.follow(position - 1):
                    yield event
                return
            await asyncio.sleep(REPLAY_POLL_S)
            events = await self.store.events(record.id, position - 1)
            if not events and not await self.store.is_held(record.id):  # ended, or nobody runs it: adopted here
                if (current := await self.store.get(record.id)) is None:
                    return  # deleted meanwhile
                record = await self._unless_orphaned(current)
                events = record.events[position:]

    async def input_items(self, rid: str, owner: str, limit: int, order: str, after: str | None) -> dict[str, Any]:
        """One page of a finished response's input items (as OpenAI lists them: newest first by default)."""
        _, record = await self.find(rid, owner)
        if record is None:
            raise RequestError(f"response {rid!r} is still running; its input items are listed once it ends", None, 409)
        items = list(record.input_items)
        if order == "desc":
            items.reverse()
        if after:
            ids = [i.get("id") for i in items]
            items = items[ids.index(after) + 1 :] if after in ids else []
        page = items[:limit]
        first, last = (page[0]["id"], page[-1]["id"]) if page else (None, None)
        return {"object": "list", "data": page, "first_id": first, "last_id": last, "has_more": len(items) > limit}

    async def delete(self, rid: str, owner: str) -> dict[str, Any]:
        live, _ = await self.find(rid, owner)  # another key's id: 404 like a missing one
        if live is not None and live.task:
            live.task.cancel()
            await live.done.wait()
        if not await self.store.delete(rid):
            raise RequestError(f"response {rid!r} not found", "response_id", 404, "not_found")
        return {"id": rid, "object": "response.deleted", "deleted": True}

    async def cancel(self, rid: str, owner: str) -> dict[str, Any]:
        live, record = await self.find(rid, owner)
        if live is None:
            if record and record.body.get("status") == "cancelled":
                return record.body
            if record and record.body.get("status") in RUNNING:  # running on another replica
                return await self._cancel_elsewhere(rid, record)
            raise RequestError("only a background response that is still running can be cancelled", None, 400)
        if not live.request.background:
            raise RequestError("only background responses can be cancelled", None, 400)
        if live.task:
            live.task.cancel()
        await live.done.wait()
        return live.builder.body

    async def _cancel_elsewhere(self, rid: str, record: Record) -> dict[str, Any]:
        """Flag the response in the shared store; the replica running it cancels it (`Upkeep.watch_cancels`)."""
        await self.store.request_cancel(rid)
        with anyio.move_on_after(CANCEL_WAIT_S):
            while record.body.get("status") in RUNNING:
                await asyncio.sleep(0.1)
                record = await self._unless_orphaned(await self.store.get(rid) or record)  # orphaned: ended here
        return record.body


async def _first(done: Awaitable[Any], gone: Awaitable[None]) -> bool:
    """Wait for `done` or `gone`, whichever comes first; True when `done` did."""
    waiters = [asyncio.ensure_future(done), asyncio.ensure_future(gone)]
    try:
        finished, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waiters:
            task.cancel()
    return waiters[0] in finished
