"""The Conversations API: durable histories that responses read before their input and append to after.

Ownership, pagination and item shapes are decided here, once, over either backend
(`persist`). A conversation's items are rendered for the model the way client-sent input
items are (`kinds.to_messages`), so what `items.list` shows is exactly what the next response reads;
items that could not be rendered are refused when they are added (400), not when a response runs.
One response runs in a conversation at a time, on every replica sharing the store (`Lease`), as on
OpenAI: a second is refused (400 `conversation_locked`) instead of reading items a running response has
not appended yet and appending in the order the two finish.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import anyio
import structlog
from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.errors import RequestError
from orchestrator.files import Files
from orchestrator.kinds import EchoContext, to_messages
from orchestrator.persist import Conversation, ConversationStore
from orchestrator.request.attachments import Limits, inline
from orchestrator.request.items import normalize
from orchestrator.request.schema import check_include, check_metadata
from orchestrator.responses.events import new_id

log = structlog.get_logger(__name__)
LEASE_S = 30.0  # how long a holder that stopped renewing (its replica died) keeps a conversation locked
MAX_ITEMS_PER_CALL = 20  # as OpenAI: items are added at most 20 at a time
# Item types whose SDK model requires a status; client-sent ones get "completed", as OpenAI lists them.
_STATUS_REQUIRED = ("message", "function_call_output")


class ConversationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    items: list[dict[str, Any]] | None = Field(None, max_length=MAX_ITEMS_PER_CALL)
    metadata: dict[str, str] | None = None
    _limits = field_validator("metadata")(check_metadata)


class ConversationUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    metadata: dict[str, str] | None
    _limits = field_validator("metadata")(check_metadata)


class ItemsCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    items: list[dict[str, Any]] = Field(max_length=MAX_ITEMS_PER_CALL)


def not_found(conv_id: str) -> RequestError:
    return RequestError(f"conversation {conv_id!r} not found", "conversation_id", 404, "not_found")


def as_item(item: dict[str, Any]) -> dict[str, Any]:
    """An item as a conversation lists it: with an id, and a status where the API's item type has one."""
    if item.get("type") in _STATUS_REQUIRED:
        item.setdefault("status", "completed")
    return item


class Lease:
    """A running response's hold on its conversation: renewed every third of `LEASE_S` while the response
    runs (however long its tool calls take), released once it has settled and appended its items."""

    def __init__(self, store: ConversationStore, conv_id: str, token: str) -> None:
        self._store, self.conv_id, self._token = store, conv_id, token
        self._renewing = asyncio.create_task(self._renew())

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(LEASE_S / 3)
            try:
                if not await self._store.hold(self.conv_id, self._token, LEASE_S):
                    log.warning("conversation.lease_lost", conversation_id=self.conv_id)
            except Exception as exc:  # the store is down: the lease may lapse, the response goes on
                log.warning("conversation.lease_renewal_failed", conversation_id=self.conv_id, error=str(exc))

    async def release(self) -> None:
        self._renewing.cancel()
        await self._store.release(self.conv_id, self._token)


@dataclass(frozen=True)
class Bounds:
    """How much one conversation may hold (`--max-conversation-items`, `--max-conversation-bytes`: its items'
    JSON), so a client cannot grow one without end; checked whenever items are added, by the client or by a
    response's input."""

    items: int
    bytes: int

    def check(self, existing: list[dict[str, Any]], new: list[dict[str, Any]], param: str) -> None:
        """A 400 naming the bound that adding `new` to `existing` would pass."""
        count = len(existing) + len(new)
        if count > self.items:
            message = f"a conversation holds at most {self.items} items; this one would hold {count}"
            raise RequestError(message, param, 400, "conversation_too_large")
        size = sum(len(json.dumps(i)) for i in existing) + sum(len(json.dumps(i)) for i in new)
        if size > self.bytes:
            message = f"a conversation's items hold at most {self.bytes} bytes of JSON; this one's would hold {size}"
            raise RequestError(message, param, 400, "conversation_too_large")


class Conversations:
    """The conversations of every key; another key's conversation answers what a missing one does (404)."""

    def __init__(
        self, store: ConversationStore, bounds: Bounds, files: Files | None = None, limits: Limits | None = None
    ) -> None:
        self.store, self.bounds = store, bounds
        self.files, self.limits = files, limits

    async def _inlined(self, items: list[dict[str, Any]], owner: str) -> list[dict[str, Any]]:
        """Items added to a conversation with their `input_file` parts as text, as a response's input has them:
        the conversation keeps the text, not the file."""
        if not items or self.limits is None:
            return items
        return await inline(normalize(items), owner, self.files, self.limits, "items")

    async def create(self, owner: str, body: ConversationCreate) -> dict[str, Any]:
        conv = Conversation(new_id("conv"), owner, int(time.time()), body.metadata or {}, new_id("conv"))
        items = await self._checked(conv, [], await self._inlined(body.items or [], owner), "items")
        await self.store.put(conv)
        if items:
            await self.store.add_items(conv.id, items)
        return conv.body()

    async def find(self, conv_id: str, owner: str) -> Conversation:
        conv = await self.store.get(conv_id)
        if conv is None or conv.owner != owner:
            raise not_found(conv_id)
        return conv

    async def update(self, conv_id: str, owner: str, body: ConversationUpdate) -> dict[str, Any]:
        conv = await self.find(conv_id, owner)
        conv.metadata = body.metadata or {}
        await self.store.put(conv)
        return conv.body()

    async def delete(self, conv_id: str, owner: str) -> dict[str, Any]:
        await self.find(conv_id, owner)
        await self.store.delete(conv_id)
        return {"id": conv_id, "object": "conversation.deleted", "deleted": True}

    async def add(self, conv_id: str, owner: str, body: ItemsCreate, include: list[str]) -> dict[str, Any]:
        check_include(include)
        conv = await self.find(conv_id, owner)
        calls = conv.tools.get("calls", {})
        new = await self._inlined(body.items, owner)
        items = await self._checked(conv, await self.store.items(conv_id), new, "items")
        if conv.tools["calls"] != calls:  # the next add renders its items after these calls
            await self.store.put(conv)
        await self.store.add_items(conv_id, items)
        return _page(items, has_more=False)

    async def list(
        self, conv_id: str, owner: str, *, limit: int, order: str, after: str | None, include: list[str]
    ) -> dict[str, Any]:
        check_include(include)
        if order not in ("asc", "desc"):
            raise RequestError(f"order must be 'asc' or 'desc', not {order!r}", "order")
        if not 1 <= limit <= 100:
            raise RequestError("limit must be between 1 and 100", "limit")
        await self.find(conv_id, owner)
        items = await self.store.items(conv_id)
        if order == "desc":
            items.reverse()
        if after is not None:
            ids = [i["id"] for i in items]
            if after not in ids:
                raise RequestError(f"no item {after!r} in conversation {conv_id!r}", "after", 404, "not_found")
            items = items[ids.index(after) + 1 :]
        return _page(items[:limit], has_more=len(items) > limit)

    async def item(self, conv_id: str, owner: str, item_id: str, include: list[str]) -> dict[str, Any]:
        check_include(include)
        await self.find(conv_id, owner)
        for item in await self.store.items(conv_id):
            if item["id"] == item_id:
                return item
        raise RequestError(f"item {item_id!r} not found in conversation {conv_id!r}", "item_id", 404, "not_found")

    async def remove_item(self, conv_id: str, owner: str, item_id: str) -> dict[str, Any]:
        conv = await self.find(conv_id, owner)
        if not await self.store.delete_item(conv_id, item_id):
            raise RequestError(f"item {item_id!r} not found in conversation {conv_id!r}", "item_id", 404, "not_found")
        return conv.body()

    # --- what responses read and leave -----------------------------------------------------------------

    async def hold(self, conv: Conversation) -> Lease:
        """The conversation for one response, taken before it reads the items; 400 while another runs there."""
        token = new_id("lease")
        if not await self.store.hold(conv.id, token, LEASE_S):
            raise RequestError(
                f"another response is running in conversation {conv.id!r}; retry once it has finished",
                "conversation",
                400,
                "conversation_locked",
            )
        return Lease(self.store, conv.id, token)

    async def room(self, existing: list[dict[str, Any]], new: list[dict[str, Any]], param: str) -> None:
        """A 400 unless `new` fits the conversation's bounds after `existing` (measured in a worker thread)."""
        await anyio.to_thread.run_sync(self.bounds.check, existing, new, param)

    async def history(self, conv: Conversation) -> list[dict[str, Any]]:
        """The conversation's items, oldest first: rendered before a response's new input."""
        return await self.store.items(conv.id)

    async def append(self, conv: Conversation, items: list[dict[str, Any]], tools: dict[str, Any]) -> None:
        """A finished response's input and output items, and the tool state its calls left behind."""
        current = await self.store.get(conv.id)
        if current is None:
            return  # deleted while the response ran: nothing to append to
        current.tools = tools
        await self.store.put(current)
        known = {i["id"] for i in await self.store.items(conv.id)}
        if fresh := [as_item(dict(i)) for i in items if i["id"] not in known]:  # a re-sent item is there already
            await self.store.add_items(conv.id, fresh)

    async def _checked(
        self, conv: Conversation, existing: list[dict[str, Any]], new: list[dict[str, Any]], param: str
    ) -> list[dict[str, Any]]:
        """`_check` in a worker thread: reading the ids and sizes of the items already there still grows with
        the whole conversation."""
        return await anyio.to_thread.run_sync(self._check, conv, existing, new, param)

    def _check(
        self, conv: Conversation, existing: list[dict[str, Any]], new: list[dict[str, Any]], param: str
    ) -> list[dict[str, Any]]:
        """New items with ids and statuses, refused (400 naming the item or the bound) unless they render after
        `existing` and fit the conversation's bounds. Only the new items are rendered, after the calls the
        conversation keeps (`conv.tools["calls"]`, which this extends); one they refuse is rendered again after
        all of `existing`, which is what decides (a call kept before the record held calls, or lost to a race)."""
        items = [as_item(i) for i in normalize(new)] if new else []
        self.bounds.check(existing, items, param)
        seen = {i["id"] for i in existing}
        for n, item in enumerate(items):
            if item["id"] in seen:
                raise RequestError(f"item id {item['id']!r} is already in this conversation", f"{param}[{n}].id")
            seen.add(item["id"])
        echo = EchoContext(dict(conv.tools.get("calls", {})))
        try:
            to_messages(items, echo)
        except RequestError:
            echo = EchoContext(dict(conv.tools.get("calls", {})))
            _rendered_after(existing, items, echo, param)
        conv.tools = {**conv.tools, "calls": echo.calls}
        return items


def _rendered_after(existing: list[dict[str, Any]], items: list[dict[str, Any]], echo: EchoContext, param: str) -> None:
    """Render `items` after all of `existing`; a refusal names the new item (`param[i]`), not its place in both."""
    try:
        to_messages(existing + items, echo)
    except RequestError as exc:
        where = exc.param or ""
        if where.startswith("input["):
            index, _, rest = where.removeprefix("input[").partition("]")
            exc.param = f"{param}[{int(index) - len(existing)}]{rest}"
        raise


def _page(items: list[dict[str, Any]], *, has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": has_more,
    }
