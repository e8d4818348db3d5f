"""Usage counted per API key (requests, tokens, tool calls, limits hit), kept where every replica adds to and
reads the same counts: a row per (owner, counter) in the SQLite file, one Redis hash per owner (`usage:OWNER`,
its counters `HINCRBY`ed) with a set of the owners counted. Counts are only ever added to; they keep no secret,
only the key's id (`guard.auth.key_id`)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

Counts = dict[str, dict[str, int]]
"""owner -> counter -> count."""


class UsageStore(Protocol):
    async def add(self, counts: Counts) -> None: ...
    async def read(self) -> Counts: ...


class SQLiteFile(Protocol):
    """What the SQLite backend's connection gives (`sqlite.Connection`)."""

    db: sqlite3.Connection

    async def run(self, fn: Callable[..., T], *args: Any) -> T: ...


class RedisClient(Protocol):
    """What the Redis backend's connection gives (`redis.Connection`)."""

    client: Any
    prefix: str

    def errors(self) -> contextlib.AbstractAsyncContextManager[None]: ...


class SQLiteUsage:
    def __init__(self, connection: SQLiteFile) -> None:
        self._c = connection
        connection.db.execute(
            "CREATE TABLE IF NOT EXISTS usage (owner TEXT, counter TEXT, n INTEGER, PRIMARY KEY (owner, counter))"
        )

    def _add(self, counts: Counts) -> None:
        rows = [(owner, name, n) for owner, named in counts.items() for name, n in named.items()]
        self._c.db.executemany(
            "INSERT INTO usage (owner, counter, n) VALUES (?, ?, ?)"
            " ON CONFLICT (owner, counter) DO UPDATE SET n = n + excluded.n",
            rows,
        )

    def _read(self) -> Counts:
        found: Counts = {}
        for owner, name, n in self._c.db.execute("SELECT owner, counter, n FROM usage"):
            found.setdefault(owner, {})[name] = int(n)
        return found

    async def add(self, counts: Counts) -> None:
        await self._c.run(self._add, counts)

    async def read(self) -> Counts:
        return await self._c.run(self._read)


class RedisUsage:
    def __init__(self, connection: RedisClient) -> None:
        self._c = connection
        self._owners = f"{connection.prefix}usage-owners"

    async def add(self, counts: Counts) -> None:
        async with self._c.errors():
            pipe = self._c.client.pipeline(transaction=False)
            for owner, named in counts.items():
                pipe.sadd(self._owners, owner)
                for name, n in named.items():
                    pipe.hincrby(f"{self._c.prefix}usage:{owner}", name, n)
            await pipe.execute()

    async def read(self) -> Counts:
        async with self._c.errors():
            owners = sorted(
                o if isinstance(o, str) else o.decode() for o in await self._c.client.smembers(self._owners)
            )
            pipe = self._c.client.pipeline(transaction=False)
            for owner in owners:
                pipe.hgetall(f"{self._c.prefix}usage:{owner}")
            hashes = await pipe.execute()
        return {
            owner: {_text(k): int(v) for k, v in named.items()} for owner, named in zip(owners, hashes, strict=True)
        }


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode()
