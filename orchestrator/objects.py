"""Owned objects with an expiry (files, containers, container files), in the configured store kind.

An object is a JSON dict with at least `id`, `owner` and `expires_at` (Unix seconds), filed under a
`kind`. SQLite serves one replica, Redis several. Both answer only unexpired objects, list an owner's
objects in the order they were stored, and hand each expired id to `take_expired` exactly once, so
one replica deletes what hangs off it (bytes on the volume, a container's files).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio

from orchestrator.errors import StoreUnavailable
from toolkit import registry
from toolkit.redis_client import redis_client

if TYPE_CHECKING:
    from orchestrator.settings import OrchestratorSettings

T = TypeVar("T")
Obj = dict[str, Any]


class Objects(Protocol):
    async def put(self, kind: str, obj: Obj) -> None: ...
    async def get(self, kind: str, obj_id: str) -> Obj | None: ...
    async def delete(self, kind: str, obj_id: str) -> bool: ...
    async def owned(self, kind: str, owner: str) -> list[Obj]: ...
    async def take_expired(self, kind: str) -> list[str]: ...
    async def aclose(self) -> None: ...


class SQLiteObjects:
    """One table in the response store's SQLite file; every statement runs in a worker thread."""

    def __init__(self, path: str = ":memory:") -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._lock = threading.Lock()
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS objects (kind TEXT, id TEXT, owner TEXT, stored REAL, expires REAL,"
            " data TEXT, PRIMARY KEY (kind, id))"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS objects_owner ON objects(kind, owner, stored)")

    @classmethod
    def from_settings(cls, settings: OrchestratorSettings) -> SQLiteObjects:
        return cls(settings.store_path)

    async def _run(self, fn: Callable[[], T]) -> T:
        def locked() -> T:
            with self._lock:
                return fn()

        return await anyio.to_thread.run_sync(locked)

    async def put(self, kind: str, obj: Obj) -> None:
        def write() -> None:
            stored = self._db.execute("SELECT stored FROM objects WHERE kind = ? AND id = ?", (kind, obj["id"]))
            first = (stored.fetchone() or (time.time(),))[0]  # an update keeps its place in listings
            row = (kind, obj["id"], obj["owner"], first, obj["expires_at"], json.dumps(obj))
            self._db.execute("INSERT OR REPLACE INTO objects VALUES (?,?,?,?,?,?)", row)

        await self._run(write)

    async def get(self, kind: str, obj_id: str) -> Obj | None:
        def one() -> Any:
            query = "SELECT data FROM objects WHERE kind = ? AND id = ? AND expires > ?"
            return self._db.execute(query, (kind, obj_id, time.time())).fetchone()

        row = await self._run(one)
        return json.loads(row[0]) if row else None

    async def delete(self, kind: str, obj_id: str) -> bool:
        def drop() -> bool:
            return self._db.execute("DELETE FROM objects WHERE kind = ? AND id = ?", (kind, obj_id)).rowcount > 0

        return await self._run(drop)

    async def owned(self, kind: str, owner: str) -> list[Obj]:
        def rows() -> list[Any]:
            query = "SELECT data FROM objects WHERE kind = ? AND owner = ? AND expires > ? ORDER BY stored"
            return self._db.execute(query, (kind, owner, time.time())).fetchall()

        return [json.loads(r[0]) for r in await self._run(rows)]

    async def take_expired(self, kind: str) -> list[str]:
        def take() -> list[str]:
            now = time.time()
            ids = [
                r[0] for r in self._db.execute("SELECT id FROM objects WHERE kind = ? AND expires <= ?", (kind, now))
            ]
            self._db.execute("DELETE FROM objects WHERE kind = ? AND expires <= ?", (kind, now))
            return ids

        return await self._run(take)

    async def aclose(self) -> None:
        await self._run(self._db.close)


class RedisObjects:
    """Objects as keys expiring with them, a sorted set per owner for listing, and an expiry index per kind
    from which a replica claims an expired id by removing it (ZREM), as idle conversations are claimed."""

    def __init__(self, url: str, prefix: str = "toolfleet:") -> None:
        self._r = redis_client(url)
        self._p = prefix

    @classmethod
    def from_settings(cls, settings: OrchestratorSettings) -> RedisObjects:
        return cls(settings.redis_url or "redis://127.0.0.1:6379/0", settings.redis_prefix)

    @contextlib.asynccontextmanager
    async def _errors(self) -> AsyncIterator[None]:
        from redis.exceptions import RedisError

        try:
            yield
        except RedisError as exc:
            raise StoreUnavailable(f"the Redis object store is unavailable: {exc}") from exc

    def _key(self, kind: str, obj_id: str) -> str:
        return f"{self._p}obj:{kind}:{obj_id}"

    async def put(self, kind: str, obj: Obj) -> None:
        async with self._errors(), self._r.pipeline(transaction=True) as pipe:
            pipe.set(self._key(kind, obj["id"]), json.dumps(obj), exat=max(1, int(obj["expires_at"]) + 1))
            pipe.zadd(f"{self._p}owned:{kind}:{obj['owner']}", {obj["id"]: time.time()}, nx=True)
            pipe.zadd(f"{self._p}expiry:{kind}", {obj["id"]: obj["expires_at"]})
            await pipe.execute()

    async def get(self, kind: str, obj_id: str) -> Obj | None:
        async with self._errors():
            raw = await self._r.get(self._key(kind, obj_id))
        obj = json.loads(raw) if raw else None
        return obj if obj and obj["expires_at"] > time.time() else None

    async def delete(self, kind: str, obj_id: str) -> bool:
        obj = await self.get(kind, obj_id)
        async with self._errors(), self._r.pipeline(transaction=True) as pipe:
            pipe.delete(self._key(kind, obj_id))
            pipe.zrem(f"{self._p}expiry:{kind}", obj_id)
            if obj is not None:
                pipe.zrem(f"{self._p}owned:{kind}:{obj['owner']}", obj_id)
            deleted, *_ = await pipe.execute()
        return bool(deleted)

    async def owned(self, kind: str, owner: str) -> list[Obj]:
        index = f"{self._p}owned:{kind}:{owner}"
        async with self._errors():
            ids = [i.decode() for i in await self._r.zrange(index, 0, -1)]
            raws = await self._r.mget([self._key(kind, i) for i in ids]) if ids else []
            if gone := [i for i, raw in zip(ids, raws, strict=True) if raw is None]:
                await self._r.zrem(index, *gone)
        now = time.time()
        return [o for o in (json.loads(raw) for raw in raws if raw is not None) if o["expires_at"] > now]

    async def take_expired(self, kind: str) -> list[str]:
        expiry = f"{self._p}expiry:{kind}"
        async with self._errors():
            ids = [i.decode() for i in await self._r.zrangebyscore(expiry, 0, time.time())]
            return [i for i in ids if await self._r.zrem(expiry, i)]  # another replica may claim one first

    async def aclose(self) -> None:
        await self._r.aclose()


OBJECT_STORES: registry.Registry = {
    "sqlite": "orchestrator.objects:SQLiteObjects",
    "redis": "orchestrator.objects:RedisObjects",
}


def open_objects(settings: OrchestratorSettings) -> Objects:
    """The object store of the kind `--store` names."""
    objects: Objects = registry.load(OBJECT_STORES, settings.store, "object store").from_settings(settings)
    return objects
