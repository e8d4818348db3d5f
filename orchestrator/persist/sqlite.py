"""The three stores in one SQLite file, over one connection: the default, for one replica.

`sqlite3` blocks (a commit per response, JSON of the whole record), so every operation runs in a worker
thread (`Connection.run`); the connection's lock keeps it to one statement sequence at a time. One
connection rather than one per store, so the stores never wait on each other's write lock in one process.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from orchestrator.errors import StoreUnavailable
from orchestrator.persist.base import RESULTS_PER_RESPONSE, Conversation, Obj, Record, StoreFull
from orchestrator.persist.roster import SQLiteRoster
from orchestrator.persist.usage import SQLiteUsage

if TYPE_CHECKING:
    from orchestrator.settings import OrchestratorSettings

T = TypeVar("T")


class Connection:
    """The file's one connection, with what every store on it keeps to: the retention (`ttl_s`) and the bounds
    (`per_key` of each kind per owner, `max_responses` of each kind in all; see `base`)."""

    def __init__(self, path: str, *, max_responses: int, per_key: int, ttl_s: float) -> None:
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self.max_responses, self.per_key, self.ttl_s = max_responses, per_key, ttl_s
        if path != ":memory:":
            self.db.execute("PRAGMA journal_mode=WAL")

    @property
    def bounds(self) -> tuple[int, int]:
        """(per owner, in all), for each kind this file keeps: responses, conversations."""
        return self.per_key, self.max_responses

    def _locked(self, fn: Callable[..., T], *args: Any) -> T:
        with self._lock:
            return fn(*args)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run one blocking operation in a worker thread, off the event loop, holding the connection. A file
        that cannot be used (locked past the busy timeout, disk full, I/O error, read-only) is
        `StoreUnavailable`, a 503 as a Redis away is, not a 500 blamed on nothing."""
        try:
            return await anyio.to_thread.run_sync(self._locked, fn, *args)
        except sqlite3.OperationalError as exc:
            raise StoreUnavailable(f"the SQLite store is unavailable: {exc}") from exc


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


_TAKE_HOLD = (
    "INSERT INTO running (id, until, holder) VALUES (?,?,?) ON CONFLICT(id) DO UPDATE SET"
    " until = excluded.until, holder = excluded.holder WHERE holder = excluded.holder OR until < ?"
)
"""A response's hold taken (when free or lapsed) or renewed (when the holder's), in one statement."""


def append_events(db: sqlite3.Connection, rid: str, start: int, events: list[str], hold: tuple[str, float]) -> bool:
    """Events (JSON) appended to response `rid`'s log in one transaction, while `hold` (holder, seconds) is
    taken or renewed and the log ends at `start`; nothing written otherwise (`Store.append_events`)."""
    holder, hold_s = hold
    now = time.time()
    db.execute("BEGIN IMMEDIATE")
    try:
        held = db.execute(_TAKE_HOLD, (rid, now + hold_s, holder, now)).rowcount > 0
        end = db.execute("SELECT COALESCE(MAX(seq) + 1, 0) FROM events WHERE rid = ?", (rid,)).fetchone()[0]
        if not held or end != start:
            db.execute("ROLLBACK")
            return False
        db.executemany("INSERT INTO events VALUES (?,?,?)", [(rid, start + i, e) for i, e in enumerate(events)])
        db.execute("COMMIT")
        return True
    except BaseException:
        db.execute("ROLLBACK")
        raise


def logged_events(db: sqlite3.Connection, rid: str, after: int) -> list[dict[str, Any]]:
    rows = db.execute("SELECT event FROM events WHERE rid = ? AND seq > ? ORDER BY seq", (rid, after))
    return [json.loads(r[0]) for r in rows]


class SQLiteResponses:
    """Responses: a key's oldest beyond `per_key` and any older than `ttl_s` are dropped, and a new one is
    refused at `max_responses` (see `base`)."""

    def __init__(self, connection: Connection) -> None:
        self._c = connection
        self._db = db = connection.db
        self._puts = 0
        db.execute(
            "CREATE TABLE IF NOT EXISTS responses (id TEXT PRIMARY KEY, created REAL, conversation TEXT,"
            " body TEXT, input_items TEXT, messages TEXT, events TEXT, tools TEXT)"
        )
        db.execute("CREATE INDEX IF NOT EXISTS responses_created ON responses(created)")
        columns = {r[1] for r in db.execute("PRAGMA table_info(responses)")}
        if "owner" not in columns:  # a file from before API keys: its responses belong to `anonymous`
            db.execute("ALTER TABLE responses ADD COLUMN owner TEXT NOT NULL DEFAULT 'anonymous'")
        db.execute("CREATE INDEX IF NOT EXISTS responses_owner ON responses(owner, created)")
        db.execute("CREATE TABLE IF NOT EXISTS conversations (id TEXT PRIMARY KEY, last_used REAL, urls TEXT)")
        db.execute("CREATE TABLE IF NOT EXISTS results (id TEXT PRIMARY KEY, created REAL, text TEXT)")
        if "owner" not in {r[1] for r in db.execute("PRAGMA table_info(results)")}:
            db.execute("ALTER TABLE results ADD COLUMN owner TEXT NOT NULL DEFAULT ''")
        db.execute("CREATE INDEX IF NOT EXISTS results_owner ON results(owner, created)")
        db.execute("CREATE TABLE IF NOT EXISTS cancels (id TEXT PRIMARY KEY, created REAL)")
        db.execute("CREATE TABLE IF NOT EXISTS running (id TEXT PRIMARY KEY, until REAL)")
        if "holder" not in {r[1] for r in db.execute("PRAGMA table_info(running)")}:
            db.execute("ALTER TABLE running ADD COLUMN holder TEXT NOT NULL DEFAULT ''")
        if "resume" not in columns:
            db.execute("ALTER TABLE responses ADD COLUMN resume TEXT")
        db.execute(  # background responses' event logs
            "CREATE TABLE IF NOT EXISTS events (rid TEXT, seq INTEGER, event TEXT, PRIMARY KEY (rid, seq))"
            " WITHOUT ROWID"
        )

    def _put(self, record: Record) -> None:
        if self._db.execute("SELECT 1 FROM responses WHERE id = ?", (record.id,)).fetchone() is None:
            self._db.execute("DELETE FROM responses WHERE created < ?", (time.time() - self._c.ttl_s,))
            make_room(self._db, "responses", "created", record.owner, self._c.bounds, "responses")
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
            json.dumps(record.resume) if record.resume is not None else None,
        )
        self._db.execute(
            "INSERT OR REPLACE INTO responses (id, created, conversation, body, input_items, messages, events,"
            " tools, owner, resume) VALUES (?,?,?,?,?,?,?,?,?,?)",
            row,
        )
        self._puts += 1
        if self._puts % 64 == 1:
            self._prune()

    def _prune(self) -> None:
        self._db.execute("DELETE FROM responses WHERE created < ?", (time.time() - self._c.ttl_s,))
        self._db.execute("DELETE FROM results WHERE created < ?", (time.time() - self._c.ttl_s,))
        self._db.execute("DELETE FROM events WHERE rid NOT IN (SELECT id FROM responses)")  # expired or dropped

    def _room(self, owner: str) -> None:
        """Refuse (StoreFull) when a new response of `owner` could only be kept past the fleet-wide bound."""
        if owner_count(self._db, "responses", owner) < self._c.per_key:
            self._db.execute("DELETE FROM responses WHERE created < ?", (time.time() - self._c.ttl_s,))
            refuse_when_full(self._db, "responses", self._c.max_responses, "responses")

    def _get(self, response_id: str) -> Record | None:
        row = self._db.execute(
            "SELECT id, conversation, body, input_items, messages, events, tools, created, owner, resume"
            " FROM responses WHERE id = ?",
            (response_id,),
        ).fetchone()
        if row is None or row[7] < time.time() - self._c.ttl_s:
            return None
        resume = json.loads(row[9]) if row[9] is not None else None
        record = Record(row[0], row[1], *(json.loads(x) for x in row[2:7]), owner=row[8], resume=resume)
        record.events = record.events or logged_events(self._db, response_id, -1)  # a background response's log
        return record

    def _delete(self, response_id: str) -> bool:
        self._db.execute("DELETE FROM events WHERE rid = ?", (response_id,))
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
                (owner, self._c.per_key * RESULTS_PER_RESPONSE),
            )

    def _get_results(self, item_ids: list[str]) -> dict[str, str]:
        marks = ",".join("?" * len(item_ids))
        rows = self._db.execute(
            f"SELECT id, text FROM results WHERE created >= ? AND id IN ({marks})",  # only placeholders
            (time.time() - self._c.ttl_s, *item_ids),
        ).fetchall()
        return dict(rows)

    def _request_cancel(self, response_id: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO cancels VALUES (?,?)", (response_id, time.time()))
        self._db.execute("DELETE FROM cancels WHERE created < ?", (time.time() - 3600,))

    def _cancel_requested(self, response_ids: list[str]) -> set[str]:
        marks = ",".join("?" * len(response_ids))
        rows = self._db.execute(f"SELECT id FROM cancels WHERE id IN ({marks})", response_ids).fetchall()
        return {r[0] for r in rows}

    def _hold_running(self, response_ids: list[str], ttl_s: float, holder: str) -> set[str]:
        """One statement per id (taken when free or lapsed, renewed when `holder`'s), so atomic across the
        processes sharing the file; a lapsed row stays until released or taken (`orphaned` lists it)."""
        now = time.time()
        held = set()
        for response_id in response_ids:
            taken = self._db.execute(_TAKE_HOLD, (response_id, now + ttl_s, holder, now))
            if taken.rowcount > 0:
                held.add(response_id)
        return held

    def _release_running(self, response_id: str, holder: str) -> None:
        self._db.execute("DELETE FROM running WHERE id = ? AND holder = ?", (response_id, holder))

    def _orphaned(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT id FROM running WHERE until < ?", (time.time(),))]

    def _held(self, most: int, besides: str) -> dict[str, str]:
        query = "SELECT id, holder FROM running WHERE until >= ? AND holder != ? LIMIT ?"
        return dict(self._db.execute(query, (time.time(), besides, most)).fetchall())

    def _is_held(self, response_id: str) -> bool:
        row = self._db.execute("SELECT 1 FROM running WHERE id = ? AND until >= ?", (response_id, time.time()))
        return row.fetchone() is not None

    async def put(self, record: Record) -> None:
        return await self._c.run(self._put, record)

    async def room(self, owner: str) -> None:
        return await self._c.run(self._room, owner)

    async def get(self, response_id: str) -> Record | None:
        return await self._c.run(self._get, response_id)

    async def delete(self, response_id: str) -> bool:
        return await self._c.run(self._delete, response_id)

    async def touch_conversation(self, conversation: str, urls: set[str]) -> None:
        return await self._c.run(self._touch_conversation, conversation, urls)

    async def idle_conversations(self, idle_s: float) -> list[tuple[str, set[str]]]:
        return await self._c.run(self._idle_conversations, idle_s)

    async def forget_conversation(self, conversation: str) -> None:
        return await self._c.run(self._forget_conversation, conversation)

    async def put_results(self, results: dict[str, str]) -> None:
        return await self._c.run(self._put_results, results)

    async def get_results(self, item_ids: list[str]) -> dict[str, str]:
        return await self._c.run(self._get_results, item_ids)

    async def request_cancel(self, response_id: str) -> None:
        return await self._c.run(self._request_cancel, response_id)

    async def cancel_requested(self, response_ids: list[str]) -> set[str]:
        return await self._c.run(self._cancel_requested, response_ids)

    async def hold_running(self, response_ids: list[str], ttl_s: float, holder: str) -> set[str]:
        return await self._c.run(self._hold_running, response_ids, ttl_s, holder)

    async def release_running(self, response_id: str, holder: str) -> None:
        return await self._c.run(self._release_running, response_id, holder)

    async def orphaned(self) -> list[str]:
        return await self._c.run(self._orphaned)

    async def is_held(self, response_id: str) -> bool:
        return await self._c.run(self._is_held, response_id)

    async def held(self, most: int, besides: str) -> dict[str, str]:
        return await self._c.run(self._held, most, besides)

    async def append_events(
        self, response_id: str, start: int, events: list[dict[str, Any]], holder: str, hold_s: float
    ) -> bool:
        rows = [json.dumps(e) for e in events]
        return await self._c.run(append_events, self._db, response_id, start, rows, (holder, hold_s))

    async def events(self, response_id: str, after: int) -> list[dict[str, Any]]:
        return await self._c.run(logged_events, self._db, response_id, after)


class SQLiteConversations:
    """Two tables beside the responses, with their retention (counted from the last write) and bounds: a new
    conversation at its key's bound drops that key's least recently written (with its items)."""

    def __init__(self, connection: Connection) -> None:
        self._c = connection
        self._db = db = connection.db
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
        db = self._db
        db.execute("DELETE FROM convs WHERE updated < ?", (time.time() - self._c.ttl_s,))
        if db.execute("SELECT 1 FROM convs WHERE id = ?", (conv.id,)).fetchone() is None:
            make_room(db, "convs", "updated", conv.owner, self._c.bounds, "conversations")
        row = (conv.id, time.time(), conv.owner, json.dumps(asdict(conv)))
        db.execute("INSERT OR REPLACE INTO convs VALUES (?,?,?,?)", row)
        db.execute("DELETE FROM conv_items WHERE conv NOT IN (SELECT id FROM convs)")  # expired or dropped

    def _get(self, conv_id: str) -> Conversation | None:
        row = self._db.execute("SELECT body, updated FROM convs WHERE id = ?", (conv_id,)).fetchone()
        if row is None or row[1] < time.time() - self._c.ttl_s:
            return None
        return Conversation(**json.loads(row[0]))

    def _delete(self, conv_id: str) -> bool:
        self._db.execute("DELETE FROM conv_items WHERE conv = ?", (conv_id,))
        return self._db.execute("DELETE FROM convs WHERE id = ?", (conv_id,)).rowcount > 0

    def _add_items(self, conv_id: str, items: list[dict[str, Any]]) -> None:
        rows = [(conv_id, i["id"], json.dumps(i)) for i in items]
        self._db.executemany("INSERT INTO conv_items (conv, id, item) VALUES (?,?,?)", rows)
        self._db.execute("UPDATE convs SET updated = ? WHERE id = ?", (time.time(), conv_id))

    def _items(self, conv_id: str) -> list[dict[str, Any]]:
        rows = self._db.execute("SELECT item FROM conv_items WHERE conv = ? ORDER BY seq", (conv_id,))
        return [json.loads(r[0]) for r in rows]

    def _delete_item(self, conv_id: str, item_id: str) -> bool:
        return self._db.execute("DELETE FROM conv_items WHERE conv = ? AND id = ?", (conv_id, item_id)).rowcount > 0

    def _hold(self, conv_id: str, token: str, lease_s: float) -> bool:
        now, db = time.time(), self._db
        db.execute("DELETE FROM conv_leases WHERE conv = ? AND expires < ?", (conv_id, now))
        held = db.execute(  # taken when free, extended when ours; one statement, so atomic across processes
            "INSERT INTO conv_leases VALUES (?,?,?) ON CONFLICT(conv) DO UPDATE SET expires = excluded.expires"
            " WHERE token = excluded.token",
            (conv_id, token, now + lease_s),
        )
        return held.rowcount > 0

    def _release(self, conv_id: str, token: str) -> None:
        self._db.execute("DELETE FROM conv_leases WHERE conv = ? AND token = ?", (conv_id, token))

    async def hold(self, conv_id: str, token: str, lease_s: float) -> bool:
        return await self._c.run(self._hold, conv_id, token, lease_s)

    async def release(self, conv_id: str, token: str) -> None:
        return await self._c.run(self._release, conv_id, token)

    async def put(self, conv: Conversation) -> None:
        return await self._c.run(self._put, conv)

    async def get(self, conv_id: str) -> Conversation | None:
        return await self._c.run(self._get, conv_id)

    async def delete(self, conv_id: str) -> bool:
        return await self._c.run(self._delete, conv_id)

    async def add_items(self, conv_id: str, items: list[dict[str, Any]]) -> None:
        return await self._c.run(self._add_items, conv_id, items)

    async def items(self, conv_id: str) -> list[dict[str, Any]]:
        return await self._c.run(self._items, conv_id)

    async def delete_item(self, conv_id: str, item_id: str) -> bool:
        return await self._c.run(self._delete_item, conv_id, item_id)


class SQLiteObjects:
    """One table of owned objects by kind, beside the responses."""

    def __init__(self, connection: Connection) -> None:
        self._c = connection
        self._db = db = connection.db
        db.execute(
            "CREATE TABLE IF NOT EXISTS objects (kind TEXT, id TEXT, owner TEXT, stored REAL, expires REAL,"
            " data TEXT, PRIMARY KEY (kind, id))"
        )
        db.execute("CREATE INDEX IF NOT EXISTS objects_owner ON objects(kind, owner, stored)")

    def _put(self, kind: str, obj: Obj) -> None:
        stored = self._db.execute("SELECT stored FROM objects WHERE kind = ? AND id = ?", (kind, obj["id"]))
        first = (stored.fetchone() or (time.time(),))[0]  # an update keeps its place in listings
        row = (kind, obj["id"], obj["owner"], first, obj["expires_at"], json.dumps(obj))
        self._db.execute("INSERT OR REPLACE INTO objects VALUES (?,?,?,?,?,?)", row)

    def _get(self, kind: str, obj_id: str) -> Obj | None:
        query = "SELECT data FROM objects WHERE kind = ? AND id = ? AND expires > ?"
        row = self._db.execute(query, (kind, obj_id, time.time())).fetchone()
        return json.loads(row[0]) if row else None

    def _delete(self, kind: str, obj_id: str) -> bool:
        return self._db.execute("DELETE FROM objects WHERE kind = ? AND id = ?", (kind, obj_id)).rowcount > 0

    def _owned(self, kind: str, owner: str) -> list[Obj]:
        query = "SELECT data FROM objects WHERE kind = ? AND owner = ? AND expires > ? ORDER BY stored"
        return [json.loads(r[0]) for r in self._db.execute(query, (kind, owner, time.time()))]

    def _take_expired(self, kind: str) -> list[str]:
        now = time.time()
        ids = [r[0] for r in self._db.execute("SELECT id FROM objects WHERE kind = ? AND expires <= ?", (kind, now))]
        self._db.execute("DELETE FROM objects WHERE kind = ? AND expires <= ?", (kind, now))
        return ids

    async def put(self, kind: str, obj: Obj) -> None:
        return await self._c.run(self._put, kind, obj)

    async def get(self, kind: str, obj_id: str) -> Obj | None:
        return await self._c.run(self._get, kind, obj_id)

    async def delete(self, kind: str, obj_id: str) -> bool:
        return await self._c.run(self._delete, kind, obj_id)

    async def owned(self, kind: str, owner: str) -> list[Obj]:
        return await self._c.run(self._owned, kind, owner)

    async def take_expired(self, kind: str) -> list[str]:
        return await self._c.run(self._take_expired, kind)


class SQLiteStores:
    """The three stores in the file at `path` (`:memory:` by default, for tests), over its one connection."""

    def __init__(
        self, path: str = ":memory:", *, max_responses: int = 10_000, per_key: int = 1_000, ttl_s: float = 30 * 86400
    ) -> None:
        self.connection = Connection(path, max_responses=max_responses, per_key=per_key, ttl_s=ttl_s)
        self.responses = SQLiteResponses(self.connection)
        self.conversations = SQLiteConversations(self.connection)
        self.objects = SQLiteObjects(self.connection)
        self.usage = SQLiteUsage(self.connection)
        self.roster = SQLiteRoster(self.connection)

    @classmethod
    def from_settings(cls, settings: OrchestratorSettings) -> SQLiteStores:
        return cls(
            settings.store_path,
            max_responses=settings.max_responses,
            per_key=settings.max_responses_per_key,
            ttl_s=settings.retention_s,
        )

    async def check(self) -> None:
        pass

    async def aclose(self) -> None:
        await self.connection.run(self.connection.db.close)
