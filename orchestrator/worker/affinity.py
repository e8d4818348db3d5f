"""Which worker holds a conversation's prefix: the affinity map, key -> worker URL.

vLLM makes a resent history cheap only on the worker that already holds its prefix, so a conversation's turns
should land on one worker whichever orchestrator replica takes them. With Redis configured (`--store redis`)
the map lives there (`RedisAffinity`), shared by every replica; otherwise in this replica's memory
(`MemoryAffinity`). Both are bounded (`size` keys, least recently pinned dropped first) and every pin lives
`ttl_s` after its last use. A request names several keys, most specific first (`keys_for`): the first one
pinned decides, and a served request pins them all, so a chain's first turn (found by its prompt_cache_key or
its opening) and its later turns (found by the chain's id) meet on the same worker.

The map is a hint: a Redis error is logged and the request goes to the least loaded worker.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import structlog

from toolkit.redis_client import redis_client

log = structlog.get_logger(__name__)

OPENING_MESSAGES = 1
"""How much of the history the prefix key hashes beyond the instructions (system and developer messages):
the first input message. A longer prefix would split one agent loop's turns (each resends its history with one
more message) into new keys; a shorter one (instructions alone) would pin every conversation that shares a
system prompt and tools to one worker until it spills. The instructions plus the opening message name a
conversation and stay the same on every turn it resends."""


def keys_for(chain: str, cache_key: str | None, owner: str, opening: Sequence[object]) -> tuple[str, ...]:
    """The affinity keys of a request, most specific first: its conversation, or the root of its
    `previous_response_id` chain (`chain`: the id its tool sessions share, minted by a chain's first response),
    the caller's `prompt_cache_key` (scoped to its owner), and a hash of the prompt's opening (`opening`: the
    instructions and the first input message, as JSON-able data)."""
    digest = hashlib.sha256(json.dumps(opening, sort_keys=True, default=str).encode()).hexdigest()[:32]
    keys = [f"chain:{chain}"]
    if cache_key:
        keys.append(f"pck:{owner}:{cache_key}")
    keys.append(f"prefix:{digest}")
    return tuple(keys)


class Affinity(Protocol):
    async def find(self, keys: Sequence[str]) -> str | None:
        """The worker URL pinned under the first of `keys` that has one, else None."""
        ...

    async def pin(self, keys: Sequence[str], url: str) -> None:
        """Pin every key to `url`, refreshing their TTL."""
        ...

    async def aclose(self) -> None: ...


class NoAffinity:
    """Affinity off (`--affinity false`): every request goes to the least loaded worker (the bench's baseline)."""

    async def find(self, keys: Sequence[str]) -> str | None:
        return None

    async def pin(self, keys: Sequence[str], url: str) -> None:
        return None

    async def aclose(self) -> None:
        return None


class MemoryAffinity:
    """This replica's own map: an LRU of `size` keys, each dropped `ttl_s` after it was last pinned."""

    def __init__(self, size: int, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._pins: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._size, self._ttl_s, self._clock = size, ttl_s, clock

    async def find(self, keys: Sequence[str]) -> str | None:
        now = self._clock()
        for key in keys:
            pinned = self._pins.get(key)
            if pinned is not None and pinned[1] > now:
                return pinned[0]
            self._pins.pop(key, None)
        return None

    async def pin(self, keys: Sequence[str], url: str) -> None:
        expires = self._clock() + self._ttl_s
        for key in keys:
            self._pins[key] = (url, expires)
            self._pins.move_to_end(key)
        while len(self._pins) > self._size:
            self._pins.popitem(last=False)

    async def aclose(self) -> None:
        self._pins.clear()


PIN = """
local index, url, ttl, now, size = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
for i = 2, #KEYS do
  redis.call('set', KEYS[i], url, 'EX', ttl)
  redis.call('zadd', index, now, KEYS[i])
end
redis.call('zremrangebyscore', index, '-inf', now - ttl)
local over = redis.call('zcard', index) - size
if over > 0 then
  local popped = redis.call('zpopmin', index, over)
  for i = 1, #popped, 2 do redis.call('del', popped[i]) end
end
return 1
"""
"""Pin KEYS[2..] to ARGV[1] for ARGV[2] s and index them by time in KEYS[1]; drop the index's expired entries
and, past ARGV[4] keys, the least recently pinned (zpopmin answers member, score, member, score...)."""


class RedisAffinity:
    """The map every replica shares: one Redis key per affinity key with a TTL, and a sorted set of them by last
    pin that bounds how many there are (`PIN`, one round trip)."""

    def __init__(self, url: str, prefix: str, size: int, ttl_s: float) -> None:
        self.client: Any = redis_client(url, decode_responses=True)
        self._prefix, self._size, self._ttl_s = f"{prefix}affinity:", size, max(1, int(ttl_s))

    async def find(self, keys: Sequence[str]) -> str | None:
        from redis.exceptions import RedisError

        try:
            urls = await self.client.mget([self._prefix + k for k in keys])
        except RedisError as exc:
            log.warning("affinity.unavailable", during="find", error=str(exc))
            return None
        return next((u for u in urls if u), None)

    async def pin(self, keys: Sequence[str], url: str) -> None:
        from redis.exceptions import RedisError

        names = [f"{self._prefix}index", *(self._prefix + k for k in keys)]
        try:
            await self.client.eval(PIN, len(names), *names, url, self._ttl_s, time.time(), self._size)
        except RedisError as exc:
            log.warning("affinity.unavailable", during="pin", error=str(exc))

    async def aclose(self) -> None:
        await self.client.aclose()
