"""The response store: SQLite by default (one replica), Redis when several replicas share it; both bounded.

A stored response keeps its body (what GET returns), its input items, the Harmony messages of the
conversation so far (what `previous_response_id` continues from) and its events (for replay).
Conversations record which tool servers hold session state for them, so idle ones can be cleaned up.
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

from toolkit import registry
from toolkit.redis_client import redis_client

if TYPE_CHECKING:
    from orchestrator.settings import OrchestratorSettings

T = TypeVar("T")


class StoreUnavailable(Exception):
    """The response store cannot be reached (Redis down): HTTP 503, never blamed on the caller."""


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


class SQLiteStore:
    """Responses in one SQLite file; the oldest beyond `max_responses` or older than `ttl_s` are dropped.

    `sqlite3` blocks (a commit per response, JSON of the whole record), so every operation runs in a
    worker thread; the lock keeps the one connection to one statement sequence at a time.
    """

    def __init__(self, path: str = ":memory:", *, max_responses: int = 10_000, ttl_s: float = 30 * 86400) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self.max_responses = max_responses
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
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS conversations (id TEXT PRIMARY KEY, last_used REAL, urls TEXT)"
            )
            self._db.execute("CREATE TABLE IF NOT EXISTS results (id TEXT PRIMARY KEY, created REAL, text TEXT)")
            self._db.execute("CREATE TABLE IF NOT EXISTS cancels (id TEXT PRIMARY KEY, created REAL)")
            self._db.execute("CREATE TABLE IF NOT EXISTS running (id TEXT PRIMARY KEY, until REAL)")

    @classmethod
    def from_settings(cls, settings: OrchestratorSettings) -> SQLiteStore:
        return cls(settings.store_path, max_responses=settings.max_responses, ttl_s=settings.retention_s)

    def _put(self, record: Record) -> None:
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
        self._db.execute(
            "DELETE FROM results WHERE id IN (SELECT id FROM results ORDER BY created DESC LIMIT -1 OFFSET ?)",
            (self.max_responses * 8,),
        )
        self._db.execute(
            "DELETE FROM responses WHERE id IN (SELECT id FROM responses ORDER BY created DESC LIMIT -1 OFFSET ?)",
            (self.max_responses,),
        )

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
        now = time.time()
        self._db.executemany("INSERT OR REPLACE INTO results VALUES (?,?,?)", [(k, now, v) for k, v in results.items()])

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


class RedisStore:
    """The same records in Redis (`redis` package, imported lazily), shared by several orchestrator replicas.

    Each response is one key that expires after `ttl_s`; a sorted set (`index`, scored by store time)
    bounds them to `max_responses`, oldest dropped first. Conversations are a set of tool-server URLs
    plus a score in `conv-idle`; a replica claims an idle conversation by removing its score, so only
    one replica cleans it up.
    """

    def __init__(
        self, url: str, *, max_responses: int = 10_000, ttl_s: float = 30 * 86400, prefix: str = "toolfleet:"
    ) -> None:
        self._r = redis_client(url)
        self.url = url
        self.max_responses = max_responses
        self.ttl_s = max(1, int(ttl_s))
        self._p = prefix

    @classmethod
    def from_settings(cls, settings: OrchestratorSettings) -> RedisStore:
        url = settings.redis_url or "redis://127.0.0.1:6379/0"
        return cls(url, max_responses=settings.max_responses, ttl_s=settings.retention_s, prefix=settings.redis_prefix)

    @contextlib.asynccontextmanager
    async def _errors(self) -> AsyncIterator[None]:
        from redis.exceptions import RedisError

        try:
            yield
        except RedisError as exc:
            raise StoreUnavailable(f"the Redis response store is unavailable: {exc}") from exc

    async def put_results(self, results: dict[str, str]) -> None:
        async with self._errors(), self._r.pipeline(transaction=False) as pipe:
            for item_id, text in results.items():
                pipe.set(f"{self._p}result:{item_id}", text, ex=self.ttl_s)
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
        index = f"{self._p}index"
        now = time.time()
        async with self._errors():
            async with self._r.pipeline(transaction=True) as pipe:
                pipe.set(f"{self._p}resp:{record.id}", json.dumps(data), ex=self.ttl_s)
                pipe.zadd(index, {record.id: now})
                pipe.zremrangebyscore(index, 0, now - self.ttl_s)  # their keys have expired already
                pipe.zcard(index)
                *_, count = await pipe.execute()
            if count > self.max_responses:
                oldest = await self._r.zrange(index, 0, count - self.max_responses - 1)
                if oldest:
                    await self._r.delete(*(f"{self._p}resp:{i.decode()}" for i in oldest))
                    await self._r.zrem(index, *oldest)

    async def get(self, response_id: str) -> Record | None:
        async with self._errors():
            raw = await self._r.get(f"{self._p}resp:{response_id}")
        return Record(**json.loads(raw)) if raw else None

    async def delete(self, response_id: str) -> bool:
        async with self._errors():
            await self._r.zrem(f"{self._p}index", response_id)
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
