"""The foreground responses running in the fleet, listed where every replica reads them (the console's Live page).

A background response is in the shared store already (its record and hold); a foreground one lives only in its
replica's memory, so each replica writes its own list here on a heartbeat: the whole list when it changed
(`renew`, which replaces what the replica had), else only a later expiry (`extend`). An entry carries no secret
(the key's id, never the key) and no output, only what a row of the Live page shows. Every list expires by
itself: a replica that dies stops renewing, and its entries lapse within `ttl_s`.

SQLite: one row per response with its expiry (`foreground`), several replicas on one file each renewing their
own rows in one transaction. Redis: one hash per replica (`fg:REPLICA`, a field per response) expiring as a
whole, and a sorted set of the replicas by expiry (`fg-replicas`) for the readers.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Protocol

from orchestrator.persist.usage import RedisClient, SQLiteFile


@dataclass(frozen=True)
class Running:
    """One foreground response as another replica's console lists it."""

    id: str
    owner: str  # the key's id (guard.auth.key_id)
    model: str
    created: float  # Unix seconds
    replica: str  # the replica running it (`ResponsesService.holder`)
    tool_calls: int = 0


class Roster(Protocol):
    async def renew(self, replica: str, entries: list[Running], ttl_s: float) -> None:
        """`replica`'s whole list, replacing what it had, expiring in `ttl_s` unless renewed or extended."""
        ...

    async def extend(self, replica: str, ttl_s: float) -> bool:
        """`replica`'s list as it is, expiring in `ttl_s` now; False: the store has none (it lapsed, or the store
        lost it), to be renewed whole."""
        ...

    async def listed(self, most: int, besides: str) -> list[Running]:
        """Up to `most` unexpired entries of every replica but `besides`, oldest first."""
        ...


class SQLiteRoster:
    def __init__(self, connection: SQLiteFile) -> None:
        self._c = connection
        connection.db.execute(
            "CREATE TABLE IF NOT EXISTS foreground (id TEXT PRIMARY KEY, replica TEXT, owner TEXT, model TEXT,"
            " created REAL, tool_calls INTEGER, until REAL)"
        )
        connection.db.execute("CREATE INDEX IF NOT EXISTS foreground_replica ON foreground(replica)")

    def _extend(self, replica: str, ttl_s: float) -> bool:
        query = "UPDATE foreground SET until = ? WHERE replica = ? AND until >= ?"
        now = time.time()
        return self._c.db.execute(query, (now + ttl_s, replica, now)).rowcount > 0

    def _renew(self, replica: str, entries: list[Running], ttl_s: float) -> None:
        """One transaction, so a reader never sees the replica's list half replaced; the lapsed rows of every
        replica (those that died) go too."""
        db = self._c.db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("DELETE FROM foreground WHERE replica = ? OR until < ?", (replica, time.time()))
            db.executemany(
                "INSERT OR REPLACE INTO foreground VALUES (?,?,?,?,?,?,?)", [_row(e, ttl_s) for e in entries]
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _listed(self, most: int, besides: str) -> list[Running]:
        query = (
            "SELECT id, owner, model, created, replica, tool_calls FROM foreground"
            " WHERE until >= ? AND replica != ? ORDER BY created LIMIT ?"
        )
        return [Running(*row) for row in self._c.db.execute(query, (time.time(), besides, most))]

    async def renew(self, replica: str, entries: list[Running], ttl_s: float) -> None:
        await self._c.run(self._renew, replica, entries, ttl_s)

    async def extend(self, replica: str, ttl_s: float) -> bool:
        return await self._c.run(self._extend, replica, ttl_s)

    async def listed(self, most: int, besides: str) -> list[Running]:
        return await self._c.run(self._listed, most, besides)


def _row(entry: Running, ttl_s: float) -> tuple[str, str, str, str, float, int, float]:
    e = entry
    return (e.id, e.replica, e.owner, e.model, e.created, e.tool_calls, time.time() + ttl_s)


class RedisRoster:
    def __init__(self, connection: RedisClient) -> None:
        self._c = connection
        self._replicas = f"{connection.prefix}fg-replicas"

    def _hash(self, replica: str) -> str:
        return f"{self._c.prefix}fg:{replica}"

    async def extend(self, replica: str, ttl_s: float) -> bool:
        async with self._c.errors(), self._c.client.pipeline(transaction=True) as pipe:
            pipe.pexpire(self._hash(replica), _ms(ttl_s))
            pipe.zadd(self._replicas, {replica: time.time() + ttl_s}, xx=True, ch=True)
            there, indexed = await pipe.execute()
        return bool(there and indexed)  # not lapsed: a reader drops a lapsed list from the index

    async def renew(self, replica: str, entries: list[Running], ttl_s: float) -> None:
        key = self._hash(replica)
        async with self._c.errors(), self._c.client.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            if entries:
                pipe.hset(key, mapping={e.id: json.dumps(asdict(e)) for e in entries})
                pipe.pexpire(key, _ms(ttl_s))
                pipe.zadd(self._replicas, {replica: time.time() + ttl_s})
            else:
                pipe.zrem(self._replicas, replica)
            await pipe.execute()

    async def listed(self, most: int, besides: str) -> list[Running]:
        """The replicas whose lists have not lapsed (the lapsed dropped from the index), then their lists."""
        client, now = self._c.client, time.time()
        async with self._c.errors():
            await client.zremrangebyscore(self._replicas, "-inf", now)
            replicas = [r.decode() for r in await client.zrangebyscore(self._replicas, now, "+inf")]
            replicas = [r for r in replicas if r != besides]
            async with client.pipeline(transaction=False) as pipe:
                for replica in replicas:
                    pipe.hvals(self._hash(replica))
                lists = await pipe.execute() if replicas else []
        found = [Running(**json.loads(raw)) for values in lists for raw in values]
        return sorted(found, key=lambda e: e.created)[:most]


def _ms(ttl_s: float) -> int:
    return max(1, int(ttl_s * 1000))
