"""Where conversations live: beside the responses, in the same SQLite file or Redis, with the same bounds.

A conversation is one record (its body as the API shows it, its owner, the tool-session id and tool
state its responses carry on) plus its items in order. Each backend shares its response store's
connection, retention (`ttl_s`, counted from the last write) and bounds, so a conversation is kept
exactly as long as a response would be: each key keeps at most `per_key` conversations, a new one drops
that key's own least recently written (with its items), never another key's, and at the fleet-wide
`max_responses` a new one of a key below its bound is refused (`StoreFull`, 507). Pagination and ownership are decided
above the backends (`conversations.Conversations`), so both behave the same.

Each backend also holds the conversation's lease (`hold`/`release`): a token with an expiry, taken
atomically in the shared SQLite file or Redis, so one response at a time runs in a conversation across
every replica that shares the store, and a crashed holder frees it when its lease runs out.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from orchestrator.store import RedisStore, SQLiteStore, Store, make_room


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


class ConversationStore(Protocol):
    async def put(self, conv: Conversation) -> None: ...
    async def get(self, conv_id: str) -> Conversation | None: ...
    async def delete(self, conv_id: str) -> bool: ...
    async def add_items(self, conv_id: str, items: list[dict[str, Any]]) -> None: ...
    async def items(self, conv_id: str) -> list[dict[str, Any]]: ...
    async def delete_item(self, conv_id: str, item_id: str) -> bool: ...
    async def hold(self, conv_id: str, token: str, lease_s: float) -> bool: ...
    async def release(self, conv_id: str, token: str) -> None: ...


class SQLiteConversations:
    """Two tables in the response store's SQLite file, written under its lock, off the event loop."""

    def __init__(self, store: SQLiteStore) -> None:
        self._s = store
        db = store._db
        with store._lock:
            db.execute("CREATE TABLE IF NOT EXISTS convs (id TEXT PRIMARY KEY, updated REAL, owner TEXT, body TEXT)")
            db.execute("CREATE INDEX IF NOT EXISTS convs_updated ON convs(updated)")
            db.execute("CREATE INDEX IF NOT EXISTS convs_owner ON convs(owner, updated)")
            db.execute(
                "CREATE TABLE IF NOT EXISTS conv_items (seq INTEGER PRIMARY KEY AUTOINCREMENT, conv TEXT,"
                " id TEXT, item TEXT)"
            )
            db.execute("CREATE INDEX IF NOT EXISTS conv_items_conv ON conv_items(conv, seq)")
            db.execute("CREATE TABLE IF NOT EXISTS conv_leases (conv TEXT PRIMARY KEY, token TEXT, expires REAL)")

    def _put(self, conv: Conversation) -> None:
        db = self._s._db
        db.execute("DELETE FROM convs WHERE updated < ?", (time.time() - self._s.ttl_s,))
        if db.execute("SELECT 1 FROM convs WHERE id = ?", (conv.id,)).fetchone() is None:
            make_room(db, "convs", "updated", conv.owner, self._s.bounds, "conversations")
        row = (conv.id, time.time(), conv.owner, json.dumps(asdict(conv)))
        db.execute("INSERT OR REPLACE INTO convs VALUES (?,?,?,?)", row)
        db.execute("DELETE FROM conv_items WHERE conv NOT IN (SELECT id FROM convs)")  # expired or dropped

    def _get(self, conv_id: str) -> Conversation | None:
        row = self._s._db.execute("SELECT body, updated FROM convs WHERE id = ?", (conv_id,)).fetchone()
        if row is None or row[1] < time.time() - self._s.ttl_s:
            return None
        return Conversation(**json.loads(row[0]))

    def _delete(self, conv_id: str) -> bool:
        self._s._db.execute("DELETE FROM conv_items WHERE conv = ?", (conv_id,))
        return self._s._db.execute("DELETE FROM convs WHERE id = ?", (conv_id,)).rowcount > 0

    def _add_items(self, conv_id: str, items: list[dict[str, Any]]) -> None:
        rows = [(conv_id, i["id"], json.dumps(i)) for i in items]
        self._s._db.executemany("INSERT INTO conv_items (conv, id, item) VALUES (?,?,?)", rows)
        self._s._db.execute("UPDATE convs SET updated = ? WHERE id = ?", (time.time(), conv_id))

    def _items(self, conv_id: str) -> list[dict[str, Any]]:
        rows = self._s._db.execute("SELECT item FROM conv_items WHERE conv = ? ORDER BY seq", (conv_id,))
        return [json.loads(r[0]) for r in rows]

    def _delete_item(self, conv_id: str, item_id: str) -> bool:
        return self._s._db.execute("DELETE FROM conv_items WHERE conv = ? AND id = ?", (conv_id, item_id)).rowcount > 0

    def _hold(self, conv_id: str, token: str, lease_s: float) -> bool:
        now, db = time.time(), self._s._db
        db.execute("DELETE FROM conv_leases WHERE conv = ? AND expires < ?", (conv_id, now))
        held = db.execute(  # taken when free, extended when ours; one statement, so atomic across processes
            "INSERT INTO conv_leases VALUES (?,?,?) ON CONFLICT(conv) DO UPDATE SET expires = excluded.expires"
            " WHERE token = excluded.token",
            (conv_id, token, now + lease_s),
        )
        return held.rowcount > 0

    def _release(self, conv_id: str, token: str) -> None:
        self._s._db.execute("DELETE FROM conv_leases WHERE conv = ? AND token = ?", (conv_id, token))

    async def hold(self, conv_id: str, token: str, lease_s: float) -> bool:
        return await self._s._off_loop(self._hold, conv_id, token, lease_s)

    async def release(self, conv_id: str, token: str) -> None:
        return await self._s._off_loop(self._release, conv_id, token)

    async def put(self, conv: Conversation) -> None:
        return await self._s._off_loop(self._put, conv)

    async def get(self, conv_id: str) -> Conversation | None:
        return await self._s._off_loop(self._get, conv_id)

    async def delete(self, conv_id: str) -> bool:
        return await self._s._off_loop(self._delete, conv_id)

    async def add_items(self, conv_id: str, items: list[dict[str, Any]]) -> None:
        return await self._s._off_loop(self._add_items, conv_id, items)

    async def items(self, conv_id: str) -> list[dict[str, Any]]:
        return await self._s._off_loop(self._items, conv_id)

    async def delete_item(self, conv_id: str, item_id: str) -> bool:
        return await self._s._off_loop(self._delete_item, conv_id, item_id)


_HOLD = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
_TOUCH = """
local raw = redis.call('get', KEYS[1])
if raw then redis.call('zadd', ARGV[3] .. cjson.decode(raw).owner, 'XX', ARGV[1], ARGV[2]) end
redis.call('zadd', KEYS[2], 'XX', ARGV[1], ARGV[2])
"""
"""A write to conversation ARGV[2] (record KEYS[1]) makes it the newest in its owner's index and the fleet's."""


class RedisConversations:
    """Per conversation: its record (`cnv:ID`), its item ids in order (`cnv-order:ID`, a list) and its items
    by id (`cnv-items:ID`, a hash); all three expire together `ttl_s` after the last write. A sorted set per
    owner (`cnv-index:OWNER`) bounds each key's to `per_key`, its least recently written dropped first, and
    the fleet-wide one (`cnv-index`) refuses new ones at `max_responses` (`store.ADMIT`)."""

    def __init__(self, store: RedisStore) -> None:
        self._s = store
        self._r, self._p = store._r, store._p

    def _keys(self, conv_id: str) -> tuple[str, str, str]:
        return f"{self._p}cnv:{conv_id}", f"{self._p}cnv-order:{conv_id}", f"{self._p}cnv-items:{conv_id}"

    async def put(self, conv: Conversation) -> None:
        prefixes = list(self._keys(""))  # the keys a conversation's id goes under
        await self._s.admit("cnv-index", "conversations", conv.owner, conv.id, prefixes)
        async with self._s._errors(), self._r.pipeline(transaction=True) as pipe:
            pipe.set(self._keys(conv.id)[0], json.dumps(asdict(conv)))
            self._refresh(pipe, conv.id)
            await pipe.execute()

    def _refresh(self, pipe: Any, conv_id: str) -> None:
        for key in self._keys(conv_id):
            pipe.expire(key, self._s.ttl_s)
        record = self._keys(conv_id)[0]
        pipe.eval(_TOUCH, 2, record, f"{self._p}cnv-index", time.time(), conv_id, f"{self._p}cnv-index:")

    async def get(self, conv_id: str) -> Conversation | None:
        async with self._s._errors():
            raw = await self._r.get(self._keys(conv_id)[0])
        return Conversation(**json.loads(raw)) if raw else None

    async def delete(self, conv_id: str) -> bool:
        conv = await self.get(conv_id)
        async with self._s._errors():
            await self._r.zrem(f"{self._p}cnv-index", conv_id)
            if conv is not None:
                await self._r.zrem(f"{self._p}cnv-index:{conv.owner}", conv_id)
            await self._r.delete(*self._keys(conv_id))
            return conv is not None

    async def add_items(self, conv_id: str, items: list[dict[str, Any]]) -> None:
        _, order, by_id = self._keys(conv_id)
        async with self._s._errors(), self._r.pipeline(transaction=True) as pipe:
            pipe.rpush(order, *(i["id"] for i in items))
            pipe.hset(by_id, mapping={i["id"]: json.dumps(i) for i in items})
            self._refresh(pipe, conv_id)
            await pipe.execute()

    async def items(self, conv_id: str) -> list[dict[str, Any]]:
        _, order, by_id = self._keys(conv_id)
        async with self._s._errors():
            ids = await self._r.lrange(order, 0, -1)
            values = await self._r.hmget(by_id, ids) if ids else []
        return [json.loads(v) for v in values if v is not None]

    async def hold(self, conv_id: str, token: str, lease_s: float) -> bool:
        """Taken when free (`SET NX PX`), extended when ours, in one script so no other replica slips between."""
        async with self._s._errors():
            return bool(await self._r.eval(_HOLD, 1, f"{self._p}cnv-lease:{conv_id}", token, int(lease_s * 1000)))

    async def release(self, conv_id: str, token: str) -> None:
        async with self._s._errors():
            await self._r.eval(_RELEASE, 1, f"{self._p}cnv-lease:{conv_id}", token)

    async def delete_item(self, conv_id: str, item_id: str) -> bool:
        _, order, by_id = self._keys(conv_id)
        async with self._s._errors(), self._r.pipeline(transaction=True) as pipe:
            pipe.lrem(order, 0, item_id)
            pipe.hdel(by_id, item_id)
            removed, _ = await pipe.execute()
        return bool(removed)


BACKENDS: dict[type, type] = {SQLiteStore: SQLiteConversations, RedisStore: RedisConversations}
"""Each response store's conversation backend, which shares its connection and bounds."""


def conversations_for(store: Store) -> ConversationStore:
    """The conversation backend beside `store`."""
    backend = next((b for kind, b in BACKENDS.items() if isinstance(store, kind)), None)
    if backend is None:
        raise ValueError(f"no conversation store for a {type(store).__name__}")
    conversations: ConversationStore = backend(store)
    return conversations
