"""Where file metadata lives: the same store kind as responses (SQLite for one replica, Redis for several).

A record is the API's file object plus its owner and expiry; the bytes are on the volume (`files.py`).
Both stores answer only unexpired records and hand expired ids to `take_expired` exactly once, so
one replica deletes their bytes.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio

from orchestrator.store import StoreUnavailable
from toolkit import registry

if TYPE_CHECKING:
    from orchestrator.settings import OrchestratorSettings

T = TypeVar("T")


@dataclass
class FileRecord:
    id: str
    owner: str
    filename: str
    purpose: str
    bytes: int
    created_at: int
    expires_at: int  # the file's own `expires_after`, else the store's retention

    def body(self) -> dict[str, Any]:
        """The API's file object (`openai.types.FileObject`); `expires_at` is when it will be deleted."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": self.expires_at,
        }


class FileMeta(Protocol):
    async def put(self, record: FileRecord) -> None: ...
    async def get(self, file_id: str) -> FileRecord | None: ...
    async def delete(self, file_id: str) -> bool: ...
    async def owned(self, owner: str) -> list[FileRecord]: ...
    async def take_expired(self) -> list[str]: ...
    async def aclose(self) -> None: ...


class SQLiteFileMeta:
    """One table in the response store's SQLite file; every statement runs in a worker thread."""

    def __init__(self, path: str = ":memory:") -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._lock = threading.Lock()
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS files"
            " (id TEXT PRIMARY KEY, owner TEXT, created REAL, expires REAL, record TEXT)"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS files_owner ON files(owner, created)")

    @classmethod
    def from_settings(cls, settings: OrchestratorSettings) -> SQLiteFileMeta:
        return cls(settings.store_path)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        def locked() -> T:
            with self._lock:
                return fn(*args)

        return await anyio.to_thread.run_sync(locked)

    async def put(self, record: FileRecord) -> None:
        row = (record.id, record.owner, time.time(), record.expires_at, json.dumps(asdict(record)))  # finer order
        await self._run(self._db.execute, "INSERT OR REPLACE INTO files VALUES (?,?,?,?,?)", row)

    async def get(self, file_id: str) -> FileRecord | None:
        def one() -> Any:
            return self._db.execute(
                "SELECT record FROM files WHERE id = ? AND expires > ?", (file_id, time.time())
            ).fetchone()

        row = await self._run(one)
        return FileRecord(**json.loads(row[0])) if row else None

    async def delete(self, file_id: str) -> bool:
        cursor = await self._run(self._db.execute, "DELETE FROM files WHERE id = ?", (file_id,))
        return cursor.rowcount > 0

    async def owned(self, owner: str) -> list[FileRecord]:
        def rows() -> list[Any]:
            return self._db.execute(
                "SELECT record FROM files WHERE owner = ? AND expires > ? ORDER BY created, id", (owner, time.time())
            ).fetchall()

        return [FileRecord(**json.loads(r[0])) for r in await self._run(rows)]

    async def take_expired(self) -> list[str]:
        def take() -> list[str]:
            now = time.time()
            ids = [r[0] for r in self._db.execute("SELECT id FROM files WHERE expires <= ?", (now,))]
            self._db.execute("DELETE FROM files WHERE expires <= ?", (now,))
            return ids

        return await self._run(take)

    async def aclose(self) -> None:
        await self._run(self._db.close)


class RedisFileMeta:
    """Records as keys expiring with the file, a sorted set per owner for listing, and one expiry index
    (`files-expiry`) from which a replica claims an expired id by removing it (ZREM), as conversations are."""

    def __init__(self, url: str, prefix: str = "toolfleet:") -> None:
        import redis.asyncio as redis  # only needed when configured

        self._r = redis.from_url(url)
        self._p = prefix

    @classmethod
    def from_settings(cls, settings: OrchestratorSettings) -> RedisFileMeta:
        return cls(settings.redis_url or "redis://127.0.0.1:6379/0", settings.redis_prefix)

    @contextlib.asynccontextmanager
    async def _errors(self) -> AsyncIterator[None]:
        from redis.exceptions import RedisError

        try:
            yield
        except RedisError as exc:
            raise StoreUnavailable(f"the Redis file store is unavailable: {exc}") from exc

    async def put(self, record: FileRecord) -> None:
        async with self._errors(), self._r.pipeline(transaction=True) as pipe:
            pipe.set(f"{self._p}file:{record.id}", json.dumps(asdict(record)), exat=max(1, record.expires_at))
            pipe.zadd(f"{self._p}files:{record.owner}", {record.id: time.time()})  # finer order than created_at
            pipe.zadd(f"{self._p}files-expiry", {record.id: record.expires_at})
            await pipe.execute()

    async def get(self, file_id: str) -> FileRecord | None:
        async with self._errors():
            raw = await self._r.get(f"{self._p}file:{file_id}")
        record = FileRecord(**json.loads(raw)) if raw else None
        return record if record and record.expires_at > time.time() else None

    async def delete(self, file_id: str) -> bool:
        record = await self.get(file_id)
        async with self._errors(), self._r.pipeline(transaction=True) as pipe:
            pipe.delete(f"{self._p}file:{file_id}")
            pipe.zrem(f"{self._p}files-expiry", file_id)
            if record is not None:
                pipe.zrem(f"{self._p}files:{record.owner}", file_id)
            deleted, *_ = await pipe.execute()
        return bool(deleted)

    async def owned(self, owner: str) -> list[FileRecord]:
        index = f"{self._p}files:{owner}"
        async with self._errors():
            ids = [i.decode() for i in await self._r.zrange(index, 0, -1)]
            raws = await self._r.mget([f"{self._p}file:{i}" for i in ids]) if ids else []
            if gone := [i for i, raw in zip(ids, raws, strict=True) if raw is None]:
                await self._r.zrem(index, *gone)
        now = time.time()
        records = [FileRecord(**json.loads(raw)) for raw in raws if raw is not None]
        return [r for r in records if r.expires_at > now]

    async def take_expired(self) -> list[str]:
        expiry = f"{self._p}files-expiry"
        async with self._errors():
            ids = [i.decode() for i in await self._r.zrangebyscore(expiry, 0, time.time())]
            return [i for i in ids if await self._r.zrem(expiry, i)]  # another replica may claim one first

    async def aclose(self) -> None:
        await self._r.aclose()


FILE_STORES: registry.Registry = {
    "sqlite": "orchestrator.file_meta:SQLiteFileMeta",
    "redis": "orchestrator.file_meta:RedisFileMeta",
}


def open_file_meta(settings: OrchestratorSettings) -> FileMeta:
    """The metadata store of the kind `--store` names."""
    meta: FileMeta = registry.load(FILE_STORES, settings.store, "file store").from_settings(settings)
    return meta
