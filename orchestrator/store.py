"""The response store: SQLite by default (one replica), Redis when several replicas share it; both bounded.

A stored response keeps its body (what GET returns), its input items, the Harmony messages of the
conversation so far (what `previous_response_id` continues from) and its events (for replay).
Conversations record which tool servers hold session state for them, so idle ones can be cleaned up.

Bounds are per owner (the API key's id): each key keeps at most `per_key` responses, and a new one
drops that key's own oldest, never another key's. `max_responses` is only the fleet-wide last resort:
at that count a new response of a key below its own bound is refused (`StoreFull`, 507) rather than
making room out of someone else's. Kept web_search results and item-reference entries are bounded per
owner too (`RESULTS_PER_RESPONSE` for each response a key may keep).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio

from orchestrator.errors import RequestError, StoreUnavailable
from toolkit import registry
from toolkit.redis_client import redis_client

if TYPE_CHECKING:
    from orchestrator.settings import OrchestratorSettings

T = TypeVar("T")
RESULTS_PER_RESPONSE = 8  # kept results and reference entries of a key: this many for each response it may keep


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
    events: list[dict[str, Any]] = field(default_factory=list)
    tools: dict[str, Any] = field(default_factory=dict)  # request's tools, for chained approvals and mcp lists
    owner: str = "anonymous"  # the creating API key's id (orchestrator.auth.key_id): other keys get 404


class Store(Protocol):
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
    async def hold_running(self, response_ids: list[str], ttl_s: float) -> None: ...
    async def is_held(self, response_id: str) -> bool: ...
    async def get_results(self, item_ids: list[str]) -> dict[str, str]: ...
    async def check(self) -> None: ...
    async def aclose(self) -> None: ...


def owner_count(db: sqlite3.Connection, table: str, owner: str) -> int:
    """How many rows of `table` `owner` has (an index on `(owner, ...)` makes it a range count)."""
    row = db.execute(f"SELECT COUNT(*) FROM {table} WHERE owner = ?", (owner,)).fetchone()  # table: ours
    return int(row[0])


def refuse_when_full(db: sqlite3.Connection, table: str, most: int, what: str) -> None:
    if db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] >= most:  # table: ours, never the caller's
        raise StoreFull(what, most)


def make_room(db: sqlite3.Connection, table: str, stamp: str, owner: str, bounds: tuple[int, int], what: str) -> None:
    """Room in `table` for one more row of `owner`, `bounds` being (per owner, in all): at its own bound its
    oldest go; below it, a table at the fleet-wide bound refuses (StoreFull) rather than drop another's."""
    per_key, most = bounds
    if owner_count(db, table, owner) < per_key:
        return refuse_when_full(db, table, most, what)
    db.execute(  # table and stamp are ours, never the caller's
        f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE owner = ? ORDER BY {stamp} DESC"
        " LIMIT -1 OFFSET ?)",
        (owner, per_key - 1),
    )


class SQLiteStore:
    """Responses in one SQLite file: a key's oldest beyond `per_key` and any older than `ttl_s` are dropped,
    and a new one is refused at `max_responses` (see the module docstring).

    `sqlite3` blocks (a commit per response, JSON of the whole record), so every operation runs in a
    worker thread; the lock keeps the one connection to one statement sequence at a time.
    """

    def __init__(
        self, path: str = ":memory:", *, max_responses: int = 10_000, per_key: int = 1_000, ttl_s: float = 30 * 86400
    ) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self.max_responses = max_responses
        self.per_key = per_key
        self.ttl_s = ttl_s
        self._puts = 0
        with self._lock:
            if path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS responses (id TEXT PRIMARY KEY, created REAL, conversation TEXT,"
                " body TEXT, input_items TEXT, messages TEXT, events TEXT, tools TEXT)"
            )
            self._db.execute("CREATE INDEX IF NOT EXISTS responses_created ON responses(created)")
            columns = {r[1] for r in self._db.execute("PRAGMA table_info(responses)")}
            if "owner" not in columns:  # a file from before API keys: its responses belong to `anonymous`
                self._db.execute("ALTER TABLE responses ADD COLUMN owner TEXT NOT NULL DEFAULT 'anonymous'")
            self._db.execute("CREATE INDEX IF NOT EXISTS responses_owner ON responses(owner, created)")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS conversations (id TEXT PRIMARY KEY, last_used REAL, urls TEXT)"
            )
            self._db.execute("CREATE TABLE IF NOT EXISTS results (id TEXT PRIMARY KEY, created REAL, text TEXT)")
            if "owner" not in {r[1] for r in self._db.execute("PRAGMA table_info(results)")}:
                self._db.execute("ALTER TABLE results ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
            self._db.execute("CREATE INDEX IF NOT EXISTS results_owner ON results(owner, created)")
            self._db.execute("CREATE TABLE IF NOT EXISTS cancels (id TEXT PRIMARY KEY, created REAL)")
            self._db.execute("CREATE TABLE IF NOT EXISTS running (id TEXT PRIMARY KEY, until REAL)")

    @classmethod
    def from_settings(cls, settings: OrchestratorSettings) -> SQLiteStore:
        return cls(
            settings.store_path,
            max_responses=settings.max_responses,
            per_key=settings.max_responses_per_key,
            ttl_s=settings.retention_s,
        )

    def _put(self, record: Record) -> None:
        if self._db.execute("SELECT 1 FROM responses WHERE id = ?", (record.id,)).fetchone() is None:
            self._db.execute("DELETE FROM responses WHERE created < ?", (time.time() - self.ttl_s,))
            make_room(self._db, "responses", "created", record.owner, self.bounds, "responses")
        row = (
            record.id,
            time.time(),
            record.conversation,
            json.dumps(record.body),
            json.dumps(record.input_items),
            json.dumps(record.messages),
            json.dumps(record.events),
            json.dumps(record.tools),
            record.owner,
        )
        self._db.execute(
            "INSERT OR REPLACE INTO responses (id, created, conversation, body, input_items, messages, events,"
            " tools, owner) VALUES (?,?,?,?,?,?,?,?,?)",
            row,
        )
        self._puts += 1
        if self._puts % 64 == 1:
            self._prune()

    def _prune(self) -> None:
        self._db.execute("DELETE FROM responses WHERE created < ?", (time.time() - self.ttl_s,))
        self._db.execute("DELETE FROM results WHERE created < ?", (time.time() - self.ttl_s,))

    def _room(self, owner: str) -> None:
        """Refuse (StoreFull) when a new response of `owner` could only be kept past the fleet-wide bound."""
        if owner_count(self._db, "responses", owner) < self.per_key:
            self._db.execute("DELETE FROM responses WHERE created < ?", (time.time() - self.ttl_s,))
            refuse_when_full(self._db, "responses", self.max_responses, "responses")

    @property
    def bounds(self) -> tuple[int, int]:
        """(per owner, in all), for each kind this file keeps: responses, conversations."""
        return self.per_key, self.max_responses

    def _get(self, response_id: str) -> Record | None:
        row = self._db.execute(
            "SELECT id, conversation, body, input_items, messages, events, tools, created, owner FROM responses"
            " WHERE id = ?",
            (response_id,),
        ).fetchone()
        if row is None or row[7] < time.time() - self.ttl_s:
            return None
        return Record(row[0], row[1], *(json.loads(x) for x in row[2:7]), owner=row[8])

    def _delete(self, response_id: str) -> bool:
        return self._db.execute("DELETE FROM responses WHERE id = ?", (response_id,)).rowcount > 0

    def _touch_conversation(self, conversation: str, urls: set[str]) -> None:
        row = self._db.execute("SELECT urls FROM conversations WHERE id = ?", (conversation,)).fetchone()
        known = set(json.loads(row[0])) if row else set()
        self._db.execute(
            "INSERT OR REPLACE INTO conversations VALUES (?,?,?)",
            (conversation, time.time(), json.dumps(sorted(known | urls))),
        )

    def _idle_conversations(self, idle_s: float) -> list[tuple[str, set[str]]]:
        rows = self._db.execute(
            "SELECT id, urls FROM conversations WHERE last_used < ?", (time.time() - idle_s,)
        ).fetchall()
        return [(r[0], set(json.loads(r[1]))) for r in rows]

    def _forget_conversation(self, conversation: str) -> None:
        self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation,))

    def _put_results(self, results: dict[str, str]) -> None:
        """Results keyed `OWNER/...`: each owner keeps its newest `RESULTS_PER_RESPONSE` x `per_key`."""
        now = time.time()
        rows = [(k, now, v, k.partition("/")[0]) for k, v in results.items()]
        self._db.executemany("INSERT OR REPLACE INTO results (id, created, text, owner) VALUES (?,?,?,?)", rows)
        for owner in {row[3] for row in rows}:
            self._db.execute(
                "DELETE FROM results WHERE id IN (SELECT id FROM results WHERE owner = ? ORDER BY created DESC"
                " LIMIT -1 OFFSET ?)",
                (owner, self.per_key * RESULTS_PER_RESPONSE),
            )

    def _get_results(self, item_ids: list[str]) -> dict[str, str]:
        marks = ",".join("?" * len(item_ids))
        rows = self._db.execute(
            f"SELECT id, text FROM results WHERE created >= ? AND id IN ({marks})",  # only placeholders
            (time.time() - self.ttl_s, *item_ids),
        ).fetchall()
        return dict(rows)

    def _request_cancel(self, response_id: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO cancels VALUES (?,?)", (response_id, time.time()))
        self._db.execute("DELETE FROM cancels WHERE created < ?", (time.time() - 3600,))

    def _cancel_requested(self, response_ids: list[str]) -> set[str]:
        marks = ",".join("?" * len(response_ids))
        rows = self._db.execute(f"SELECT id FROM cancels WHERE id IN ({marks})", response_ids).fetchall()
        return {r[0] for r in rows}

    def _hold_running(self, response_ids: list[str], ttl_s: float) -> None:
        until = time.time() + ttl_s
        self._db.executemany("INSERT OR REPLACE INTO running VALUES (?,?)", [(i, until) for i in response_ids])
        self._db.execute("DELETE FROM running WHERE until < ?", (time.time(),))

    def _is_held(self, response_id: str) -> bool:
        row = self._db.execute("SELECT 1 FROM running WHERE id = ? AND until >= ?", (response_id, time.time()))
        return row.fetchone() is not None

    def _aclose(self) -> None:
        self._db.close()

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """Run one blocking operation in a worker thread, off the event loop, holding the connection's lock."""
        return await anyio.to_thread.run_sync(self._locked, fn, *args)

    def _locked(self, fn: Callable[..., T], *args: Any) -> T:
        with self._lock:
            return fn(*args)

    async def put(self, record: Record) -> None:
        return await self._off_loop(self._put, record)

    async def room(self, owner: str) -> None:
        return await self._off_loop(self._room, owner)

    async def get(self, response_id: str) -> Record | None:
        return await self._off_loop(self._get, response_id)

    async def delete(self, response_id: str) -> bool:
        return await self._off_loop(self._delete, response_id)

    async def touch_conversation(self, conversation: str, urls: set[str]) -> None:
        return await self._off_loop(self._touch_conversation, conversation, urls)

    async def idle_conversations(self, idle_s: float) -> list[tuple[str, set[str]]]:
        return await self._off_loop(self._idle_conversations, idle_s)

    async def forget_conversation(self, conversation: str) -> None:
        return await self._off_loop(self._forget_conversation, conversation)

    async def put_results(self, results: dict[str, str]) -> None:
        return await self._off_loop(self._put_results, results)

    async def get_results(self, item_ids: list[str]) -> dict[str, str]:
        return await self._off_loop(self._get_results, item_ids)

    async def request_cancel(self, response_id: str) -> None:
        return await self._off_loop(self._request_cancel, response_id)

    async def cancel_requested(self, response_ids: list[str]) -> set[str]:
        return await self._off_loop(self._cancel_requested, response_ids)

    async def hold_running(self, response_ids: list[str], ttl_s: float) -> None:
        return await self._off_loop(self._hold_running, response_ids, ttl_s)

    async def is_held(self, response_id: str) -> bool:
        return await self._off_loop(self._is_held, response_id)

    async def check(self) -> None:
        pass

    async def aclose(self) -> None:
        return await self._off_loop(self._aclose)


ADMIT = """
local all, own, id = KEYS[1], KEYS[2], ARGV[1]
local now, cutoff, per_key, most = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
redis.call('zremrangebyscore', all, '-inf', cutoff)
redis.call('zremrangebyscore', own, '-inf', cutoff)
if not redis.call('zscore', own, id) then
  local excess = redis.call('zcard', own) - per_key + 1
  if excess > 0 then
    for _, victim in ipairs(redis.call('zrange', own, 0, excess - 1)) do
      for i = 6, #ARGV do redis.call('del', ARGV[i] .. victim) end
      redis.call('zrem', all, victim)
    end
    redis.call('zremrangebyrank', own, 0, excess - 1)
  elseif redis.call('zcard', all) >= most then
    return 0
  end
end
redis.call('zadd', all, now, id)
redis.call('zadd', own, now, id)
return 1
"""
"""Room for object ARGV[1] of one owner (KEYS[2], its index; KEYS[1] the fleet-wide index), in one step so
replicas cannot interleave: the expired leave both indexes; a new object at the owner's bound drops the
owner's own oldest (the keys ARGV[6..] .. id); below it, a full fleet-wide index refuses (0)."""

KEEP = """
local own, now, cutoff, bound, prefix = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
redis.call('zremrangebyscore', own, '-inf', cutoff)
for i = 5, #ARGV do redis.call('zadd', own, now, ARGV[i]) end
local excess = redis.call('zcard', own) - bound
if excess > 0 then
  for _, victim in ipairs(redis.call('zrange', own, 0, excess - 1)) do redis.call('del', prefix .. victim) end
  redis.call('zremrangebyrank', own, 0, excess - 1)
end
return 0
"""
"""Index an owner's kept results ARGV[5..] (KEYS[1]) and drop its oldest beyond ARGV[3]."""

ROOM = """
local all, own, cutoff, per_key, most = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('zremrangebyscore', all, '-inf', cutoff)
redis.call('zremrangebyscore', own, '-inf', cutoff)
if redis.call('zcard', own) < per_key and redis.call('zcard', all) >= most then return 0 end
return 1
"""
"""Whether one more object of an owner (KEYS[2]) would be admitted by `ADMIT` (0: the store is full)."""


class RedisStore:
    """The same records in Redis (`redis` package, imported lazily), shared by several orchestrator replicas.

    Each response is one key that expires after `ttl_s`; a sorted set per owner (`index:OWNER`, scored
    by store time) bounds each key's to `per_key`, its oldest dropped first, and the fleet-wide one
    (`index`) refuses new ones at `max_responses` (`ADMIT`). Conversations are a set of tool-server URLs
    plus a score in `conv-idle`; a replica claims an idle conversation by removing its score, so only
    one replica cleans it up.
    """

    def __init__(
        self,
        url: str,
        *,
        max_responses: int = 10_000,
        per_key: int = 1_000,
        ttl_s: float = 30 * 86400,
        prefix: str = "toolfleet:",
    ) -> None:
        self._r = redis_client(url)
        self.url = url
        self.max_responses = max_responses
        self.per_key = per_key
        self.ttl_s = max(1, int(ttl_s))
        self._p = prefix

    @classmethod
    def from_settings(cls, settings: OrchestratorSettings) -> RedisStore:
        return cls(
            settings.redis_url or "redis://127.0.0.1:6379/0",
            max_responses=settings.max_responses,
            per_key=settings.max_responses_per_key,
            ttl_s=settings.retention_s,
            prefix=settings.redis_prefix,
        )

    async def admit(self, index: str, what: str, owner: str, obj_id: str, keys: list[str]) -> None:
        """Room for object `obj_id` of `owner` in the `index` sorted sets (`ADMIT`); `keys`: the key prefixes
        an evicted object's data lives under. StoreFull (naming `what`) when only the fleet-wide bound
        stands in the way."""
        now = time.time()
        indexes = (f"{self._p}{index}", f"{self._p}{index}:{owner}")
        args = (obj_id, now, now - self.ttl_s, self.per_key, self.max_responses, *keys)
        async with self._errors():
            admitted = await self._r.eval(ADMIT, 2, *indexes, *args)
        if not admitted:
            raise StoreFull(what, self.max_responses)

    async def room(self, owner: str) -> None:
        """StoreFull when a new response of `owner` would be refused by `admit` now."""
        indexes = (f"{self._p}index", f"{self._p}index:{owner}")
        async with self._errors():
            room = await self._r.eval(ROOM, 2, *indexes, time.time() - self.ttl_s, self.per_key, self.max_responses)
        if not room:
            raise StoreFull("responses", self.max_responses)

    @contextlib.asynccontextmanager
    async def _errors(self) -> AsyncIterator[None]:
        from redis.exceptions import RedisError

        try:
            yield
        except RedisError as exc:
            raise StoreUnavailable(f"the Redis response store is unavailable: {exc}") from exc

    async def put_results(self, results: dict[str, str]) -> None:
        """Results keyed `OWNER/...`: each owner keeps its newest `RESULTS_PER_RESPONSE` x `per_key` (`KEEP`)."""
        owners: dict[str, list[str]] = {}
        for item_id in results:
            owners.setdefault(item_id.partition("/")[0], []).append(item_id)
        now, bound = time.time(), self.per_key * RESULTS_PER_RESPONSE
        async with self._errors(), self._r.pipeline(transaction=False) as pipe:
            for item_id, text in results.items():
                pipe.set(f"{self._p}result:{item_id}", text, ex=self.ttl_s)
            for owner, ids in owners.items():
                index = f"{self._p}results:{owner}"
                pipe.eval(KEEP, 1, index, now, now - self.ttl_s, bound, f"{self._p}result:", *ids)
            await pipe.execute()

    async def get_results(self, item_ids: list[str]) -> dict[str, str]:
        async with self._errors():
            values = await self._r.mget([f"{self._p}result:{i}" for i in item_ids])
        return {i: v.decode() for i, v in zip(item_ids, values, strict=True) if v is not None}

    async def request_cancel(self, response_id: str) -> None:
        async with self._errors():
            await self._r.set(f"{self._p}cancel:{response_id}", b"1", ex=3600)

    async def cancel_requested(self, response_ids: list[str]) -> set[str]:
        async with self._errors():
            values = await self._r.mget([f"{self._p}cancel:{i}" for i in response_ids])
        return {i for i, v in zip(response_ids, values, strict=True) if v is not None}

    async def hold_running(self, response_ids: list[str], ttl_s: float) -> None:
        async with self._errors(), self._r.pipeline(transaction=False) as pipe:
            for response_id in response_ids:
                pipe.set(f"{self._p}running:{response_id}", b"1", px=max(1, int(ttl_s * 1000)))
            await pipe.execute()

    async def is_held(self, response_id: str) -> bool:
        async with self._errors():
            return bool(await self._r.exists(f"{self._p}running:{response_id}"))

    async def check(self) -> None:
        async with self._errors():
            await self._r.ping()

    async def put(self, record: Record) -> None:
        data = {
            k: getattr(record, k)
            for k in ("id", "conversation", "body", "input_items", "messages", "events", "tools", "owner")
        }
        await self.admit("index", "responses", record.owner, record.id, [f"{self._p}resp:"])
        async with self._errors():
            await self._r.set(f"{self._p}resp:{record.id}", json.dumps(data), ex=self.ttl_s)

    async def get(self, response_id: str) -> Record | None:
        async with self._errors():
            raw = await self._r.get(f"{self._p}resp:{response_id}")
        return Record(**json.loads(raw)) if raw else None

    async def delete(self, response_id: str) -> bool:
        record = await self.get(response_id)
        async with self._errors():
            await self._r.zrem(f"{self._p}index", response_id)
            if record is not None:
                await self._r.zrem(f"{self._p}index:{record.owner}", response_id)
            return bool(await self._r.delete(f"{self._p}resp:{response_id}"))

    async def touch_conversation(self, conversation: str, urls: set[str]) -> None:
        key = f"{self._p}conv:{conversation}"
        async with self._errors(), self._r.pipeline(transaction=True) as pipe:
            if urls:
                pipe.sadd(key, *urls)
            pipe.expire(key, self.ttl_s)
            pipe.zadd(f"{self._p}conv-idle", {conversation: time.time()})
            await pipe.execute()

    async def idle_conversations(self, idle_s: float) -> list[tuple[str, set[str]]]:
        """Idle conversations this replica has claimed (removed from `conv-idle` by its own ZREM)."""
        idle = f"{self._p}conv-idle"
        out = []
        async with self._errors():
            for raw in await self._r.zrangebyscore(idle, 0, time.time() - idle_s):
                if not await self._r.zrem(idle, raw):
                    continue  # another replica claimed it first
                conv = raw.decode()
                urls = {u.decode() for u in await self._r.smembers(f"{self._p}conv:{conv}")}
                out.append((conv, urls))
        return out

    async def forget_conversation(self, conversation: str) -> None:
        async with self._errors():
            await self._r.zrem(f"{self._p}conv-idle", conversation)
            await self._r.delete(f"{self._p}conv:{conversation}")

    async def aclose(self) -> None:
        await self._r.aclose()


STORES: registry.Registry = {"sqlite": "orchestrator.store:SQLiteStore", "redis": "orchestrator.store:RedisStore"}


def open_store(settings: OrchestratorSettings) -> Store:
    """The store `--store` names, built from the settings; an unknown name stops the start-up."""
    store: Store = registry.load(STORES, settings.store, "response store").from_settings(settings)
    return store
