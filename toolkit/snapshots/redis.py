"""Snapshots in the fleet's Redis, for states under a size cap: every replica reads them, Redis expires them.

Keys: `toolfleet:snap:<name>` holds the sealed blob with the TTL; `toolfleet:snaps:<owner tag>` is a hash of the
owner's snapshot names to `size:stored_at`, for the owner's budget (entries whose blob expired are dropped as found).
"""

from __future__ import annotations

import time
from typing import Any

from toolkit.redis_client import redis_client
from toolkit.snapshots.base import Limits, SnapshotStore, Stored

BLOB = "toolfleet:snap:"
OWNED = "toolfleet:snaps:"


class RedisSnapshots(SnapshotStore):
    def __init__(self, where: str, limits: Limits | None = None, secret: bytes | None = None) -> None:
        super().__init__(limits, secret)
        self._redis: Any = redis_client(where)

    async def _put(self, owner_tag: str, name: str, blob: bytes) -> None:
        ttl = max(int(self.limits.ttl_s), 1)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.set(BLOB + name, blob, ex=ttl)
            pipe.hset(OWNED + owner_tag, name, f"{len(blob)}:{time.time()}")
            pipe.expire(OWNED + owner_tag, ttl)
            await pipe.execute()

    async def _get(self, owner_tag: str, name: str) -> bytes | None:
        blob: bytes | None = await self._redis.get(BLOB + name)
        return blob

    async def _delete(self, owner_tag: str, name: str) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(BLOB + name)
            pipe.hdel(OWNED + owner_tag, name)
            await pipe.execute()

    async def _owned(self, owner_tag: str) -> list[Stored]:
        entries: dict[bytes, bytes] = await self._redis.hgetall(OWNED + owner_tag)
        names = [n.decode() for n in entries]
        found = []
        for name, value, present in zip(names, entries.values(), await self._present(names), strict=True):
            size, _, stored_at = value.decode().partition(":")
            if present:
                found.append(Stored(name, int(size), float(stored_at)))
            else:  # its blob expired
                await self._redis.hdel(OWNED + owner_tag, name)
        return found

    async def _present(self, names: list[str]) -> list[bool]:
        if not names:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.exists(BLOB + name)
            return [bool(n) for n in await pipe.execute()]
