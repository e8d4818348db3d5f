"""What the rest of the orchestrator sees of storage: the records, the three stores' protocols, and `Stores`,
the three over one connection of one backend (`sqlite.py`, `redis.py`).

The response store keeps a response's body (what GET returns), its input items, the Harmony messages of
the conversation so far (what `previous_response_id` continues from) and its events (for replay).
Conversations record which tool servers hold session state for them, so idle ones can be cleaned up.
A running background response is held (a lease with a holder and an expiry, renewed by its replica) and
indexed until released, so a lapsed one can be found and adopted by another replica. Its events are kept
apart, in an append-only log (`append_events`, written before any client is sent them, fenced by the hold),
so a write costs its new events alone; a record that leaves its events out gets its log's from `get`.
The conversation store keeps the Conversations API's records and items, and each conversation's lease.
The object store keeps owned objects with an expiry (files, containers, container files).

Bounds are per owner (the API key's id): each key keeps at most `per_key` responses, and as many
conversations, and a new one drops that key's own oldest, never another key's. `max_responses` is only the
fleet-wide last resort: at that count a new one of a key below its own bound is refused (`StoreFull`, 507)
rather than making room out of someone else's. Kept web_search results and item-reference entries are
bounded per owner too (`RESULTS_PER_RESPONSE` for each response a key may keep).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.errors import RequestError
from orchestrator.persist.roster import Roster
from orchestrator.persist.usage import UsageStore

RESULTS_PER_RESPONSE = 8  # kept results and reference entries of a key: this many for each response it may keep

Obj = dict[str, Any]
"""An owned object: a JSON dict with at least `id`, `owner` and `expires_at` (Unix seconds)."""


class StoreFull(RequestError):
    """The fleet-wide last-resort bound is reached: a new object is refused (507), never made room for out of
    another key's objects. Not the caller's fault, so a server error."""

    etype = "server_error"

    def __init__(self, what: str, limit: int) -> None:
        message = (
            f"the fleet-wide store is full: it holds {limit} {what}, its last-resort bound (--max-responses);"
            " nothing of another API key is dropped to make room. Delete some, or ask the operator to raise it."
        )
        super().__init__(message, None, 507, "store_full")


@dataclass
class Record:
    id: str
    conversation: str
    body: dict[str, Any]
    input_items: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # empty: those of its log (`get`)
    tools: dict[str, Any] = field(default_factory=dict)  # request's tools, for chained approvals and mcp lists
    owner: str = "anonymous"  # the creating API key's id (orchestrator.guard.auth.key_id): other keys get 404
    resume: dict[str, Any] | None = None  # a running background response's checkpoint (`responses/adopt.py`)


@dataclass
class Conversation:
    id: str
    owner: str
    created_at: int
    metadata: dict[str, str]
    session: str  # the tool sessions' x-session-id: random, never the conversation id the client sees
    tools: dict[str, Any] = field(default_factory=dict)  # calls, pending approvals, browser pages so far

    def body(self) -> dict[str, Any]:
        return {"id": self.id, "object": "conversation", "created_at": self.created_at, "metadata": self.metadata}


class Store(Protocol):
    """The response store."""

    async def put(self, record: Record) -> None: ...
    async def room(self, owner: str) -> None: ...
    async def get(self, response_id: str) -> Record | None: ...
    async def delete(self, response_id: str) -> bool: ...
    async def touch_conversation(self, conversation: str, urls: set[str]) -> None: ...
    async def idle_conversations(self, idle_s: float) -> list[tuple[str, set[str]]]: ...
    async def forget_conversation(self, conversation: str) -> None: ...
    async def put_results(self, results: dict[str, str]) -> None: ...
    async def request_cancel(self, response_id: str) -> None: ...
    async def cancel_requested(self, response_ids: list[str]) -> set[str]: ...
    async def hold_running(self, response_ids: list[str], ttl_s: float, holder: str) -> set[str]:
        """Take (when free or lapsed) or renew (when `holder`'s) each response's hold, atomically per id;
        the ids `holder` holds afterwards. A hold another holder has is left alone."""
        ...

    async def release_running(self, response_id: str, holder: str) -> None: ...
    async def orphaned(self) -> list[str]:
        """Background responses whose hold lapsed before they were released: nobody runs them."""
        ...

    async def is_held(self, response_id: str) -> bool: ...
    async def held(self, most: int, besides: str) -> dict[str, str]:
        """Up to `most` background responses whose hold has not lapsed and is not `besides`'s, each with its holder
        (the replica running it): what a replica's console lists as running elsewhere in the fleet."""
        ...

    async def append_events(
        self, response_id: str, start: int, events: list[dict[str, Any]], holder: str, hold_s: float
    ) -> bool:
        """Append `events` (numbered from `start`) to a background response's log in one atomic step, only
        when `holder` has its hold (renewed for `hold_s`, or taken again when it lapsed and nobody else took
        it) and the log ends at `start`; False otherwise: another replica goes on with the response."""
        ...

    async def events(self, response_id: str, after: int) -> list[dict[str, Any]]:
        """The logged events numbered after `after` (a stream that follows a response running elsewhere)."""
        ...

    async def get_results(self, item_ids: list[str]) -> dict[str, str]: ...


class ConversationStore(Protocol):
    """Conversations: each a record plus its items in order, kept as long as a response would be.

    Pagination and ownership are decided above the backends (`conversations.Conversations`), so both behave
    the same. `hold`/`release` is the conversation's lease: a token with an expiry, taken atomically in the
    shared SQLite file or Redis, so one response at a time runs in a conversation across every replica that
    shares the store, and a crashed holder frees it when its lease runs out."""

    async def put(self, conv: Conversation) -> None: ...
    async def get(self, conv_id: str) -> Conversation | None: ...
    async def delete(self, conv_id: str) -> bool: ...
    async def add_items(self, conv_id: str, items: list[dict[str, Any]]) -> None: ...
    async def items(self, conv_id: str) -> list[dict[str, Any]]: ...
    async def delete_item(self, conv_id: str, item_id: str) -> bool: ...
    async def hold(self, conv_id: str, token: str, lease_s: float) -> bool: ...
    async def release(self, conv_id: str, token: str) -> None: ...


class Objects(Protocol):
    """Owned objects with an expiry, filed under a `kind`. Both backends answer only unexpired objects, list an
    owner's objects in the order they were stored, and hand each expired id to `take_expired` exactly once,
    so one replica deletes what hangs off it (bytes on the volume, a container's files)."""

    async def put(self, kind: str, obj: Obj) -> None: ...
    async def get(self, kind: str, obj_id: str) -> Obj | None: ...
    async def delete(self, kind: str, obj_id: str) -> bool: ...
    async def owned(self, kind: str, owner: str) -> list[Obj]: ...
    async def take_expired(self, kind: str) -> list[str]: ...


class Stores(Protocol):
    """The three stores of one backend, over its one connection: opened once, checked at start-up (a Redis
    that cannot be reached stops it with a clear error), closed once at shutdown."""

    responses: Store
    conversations: ConversationStore
    objects: Objects
    usage: UsageStore
    roster: Roster

    async def check(self) -> None: ...
    async def aclose(self) -> None: ...
