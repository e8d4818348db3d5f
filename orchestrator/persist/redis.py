"""The three stores in Redis (the `redis` package, imported lazily), over one client: for several replicas.

Every store's commands go through `Connection.errors`, the one place a Redis error becomes
`StoreUnavailable` (503, never blamed on the caller). Bounds that replicas must not race on are one Lua
step each (`ADMIT`, `ROOM`, `KEEP`).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from orchestrator.errors import StoreUnavailable
from orchestrator.persist.base import RESULTS_PER_RESPONSE, Conversation, Obj, Record, StoreFull
from orchestrator.persist.roster import RedisRoster
from orchestrator.persist.usage import RedisUsage
from toolkit.redis_client import redis_client

if TYPE_CHECKING:
    from orchestrator.settings import OrchestratorSettings

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


class Connection:
    """The one client every store uses, with what they share: the key prefix, the retention (`ttl_s`) and the
    bounds (`per_key` of each kind per owner, `max_responses` of each kind in all; see `base`)."""

    def __init__(self, url: str, *, max_responses: int, per_key: int, ttl_s: float, prefix: str) -> None:
        self.client = redis_client(url)
        self.max_responses, self.per_key, self.prefix = max_responses, per_key, prefix
        self.ttl_s = max(1, int(ttl_s))

    @contextlib.asynccontextmanager
    async def errors(self) -> AsyncIterator[None]:
        """Redis errors inside become `StoreUnavailable`: the one mapping for every store."""
        from redis.exceptions import RedisError

        try:
            yield
        except RedisError as exc:
            raise StoreUnavailable(f"the Redis store is unavailable: {exc}") from exc

    async def admit(self, index: str, what: str, owner: str, obj_id: str, keys: list[str]) -> None:
        """Room for object `obj_id` of `owner` in the `index` sorted sets (`ADMIT`); `keys`: the key prefixes
        an evicted object's data lives under. StoreFull (naming `what`) when only the fleet-wide bound
        stands in the way."""
        now = time.time()
        indexes = (f"{self.prefix}{index}", f"{self.prefix}{index}:{owner}")
        args = (obj_id, now, now - self.ttl_s, self.per_key, self.max_responses, *keys)
        async with self.errors():
            admitted = await self.client.eval(ADMIT, 2, *indexes, *args)
        if not admitted:
            raise StoreFull(what, self.max_responses)


class RedisResponses:
    """Each response is one key that expires after `ttl_s`; a sorted set per owner (`index:OWNER`, scored
    by store time) bounds each key's to `per_key`, its oldest dropped first, and the fleet-wide one
    (`index`) refuses new ones at `max_responses` (`ADMIT`). Conversations are a set of tool-server URLs
    plus a score in `conv-idle`; a replica claims an idle conversation by removing its score, so only
    one replica cleans it up."""

    def __init__(self, connection: Connection) -> None:
        self._c = connection
        self._r, self._p = connection.client, connection.prefix

    async def room(self, owner: str) -> None:
        """StoreFull when a new response of `owner` would be refused by `admit` now."""
        c = self._c
        indexes = (f"{self._p}index", f"{self._p}index:{owner}")
        async with c.errors():
            room = await self._r.eval(ROOM, 2, *indexes, time.time() - c.ttl_s, c.per_key, c.max_responses)
        if not room:
            raise StoreFull("responses", c.max_responses)

    async def put_results(self, results: dict[str, str]) -> None:
        """Results keyed `OWNER/...`: each owner keeps its newest `RESULTS_PER_RESPONSE` x `per_key` (`KEEP`)."""
        owners: dict[str, list[str]] = {}
        for item_id in results:
            owners.setdefault(item_id.partition("/")[0], []).append(item_id)
        now, bound = time.time(), self._c.per_key * RESULTS_PER_RESPONSE
        async with self._c.errors(), self._r.pipeline(transaction=False) as pipe:
            for item_id, text in results.items():
                pipe.set(f"{self._p}result:{item_id}", text, ex=self._c.ttl_s)
            for owner, ids in owners.items():
                index = f"{self._p}results:{owner}"
                pipe.eval(KEEP, 1, index, now, now - self._c.ttl_s, bound, f"{self._p}result:", *ids)
            await pipe.execute()

    async def get_results(self, item_ids: list[str]) -> dict[str, str]:
        async with self._c.errors():
            values = await self._r.mget([f"{self._p}result:{i}" for i in item_ids])
        return {i: v.decode() for i, v in zip(item_ids, values, strict=True) if v is not None}

    async def request_cancel(self, response_id: str) -> None:
        async with self._c.errors():
            await self._r.set(f"{self._p}cancel:{response_id}", b"1", ex=3600)

    async def cancel_requested(self, response_ids: list[str]) -> set[str]:
        async with self._c.errors():
            values = await self._r.mget([f"{self._p}cancel:{i}" for i in response_ids])
        return {i for i, v in zip(response_ids, values, strict=True) if v is not None}

    async def hold_running(self, response_ids: list[str], ttl_s: float, holder: str) -> set[str]:
        """Each hold is `_HOLD` (SET NX PX, or PEXPIRE when ours): one step, so two replicas adopting the same
        lapsed response cannot both take it; the index `running` lists the held until released."""
        ms = max(1, int(ttl_s * 1000))
        async with self._c.errors(), self._r.pipeline(transaction=False) as pipe:
            for response_id in response_ids:
                pipe.eval(_HOLD, 1, f"{self._p}running:{response_id}", holder, ms)
            pipe.sadd(f"{self._p}running", *response_ids)
            *held, _ = await pipe.execute()
        return {i for i, ok in zip(response_ids, held, strict=True) if ok}

    async def release_running(self, response_id: str, holder: str) -> None:
        async with self._c.errors():
            await self._r.eval(_RELEASE, 1, f"{self._p}running:{response_id}", holder)
            await self._r.srem(f"{self._p}running", response_id)

    async def orphaned(self) -> list[str]:
        async with self._c.errors():
            ids = [i.decode() for i in await self._r.smembers(f"{self._p}running")]
            async with self._r.pipeline(transaction=False) as pipe:
                for response_id in ids:
                    pipe.exists(f"{self._p}running:{response_id}")
                held = await pipe.execute()
        return [i for i, h in zip(ids, held, strict=True) if not h]

    async def is_held(self, response_id: str) -> bool:
        async with self._c.errors():
            return bool(await self._r.exists(f"{self._p}running:{response_id}"))

    async def held(self, most: int, besides: str) -> dict[str, str]:
        async with self._c.errors():
            ids = [i.decode() for i in await self._r.srandmember(f"{self._p}running", most) or []]
            holders = await self._r.mget([f"{self._p}running:{i}" for i in ids]) if ids else []
        return {i: h.decode() for i, h in zip(ids, holders, strict=True) if h is not None and h.decode() != besides}

    async def append_events(
        self, response_id: str, start: int, events: list[dict[str, Any]], holder: str, hold_s: float
    ) -> bool:
        """`_APPEND`: the hold checked (and renewed) and the events pushed in one script."""
        keys = (f"{self._p}running:{response_id}", f"{self._p}events:{response_id}")
        args = (holder, start, max(1, int(hold_s * 1000)), self._c.ttl_s, *(json.dumps(e) for e in events))
        async with self._c.errors():
            return bool(await self._r.eval(_APPEND, 2, *keys, *args))

    async def events(self, response_id: str, after: int) -> list[dict[str, Any]]:
        async with self._c.errors():
            raws = await self._r.lrange(f"{self._p}events:{response_id}", after + 1, -1)
        return [json.loads(raw) for raw in raws]

    async def put(self, record: Record) -> None:
        data = {
            k: getattr(record, k)
            for k in ("id", "conversation", "body", "input_items", "messages", "events", "tools", "owner", "resume")
        }
        dropped = [f"{self._p}resp:", f"{self._p}events:"]  # what an evicted response leaves
        await self._c.admit("index", "responses", record.owner, record.id, dropped)
        async with self._c.errors():
            await self._r.set(f"{self._p}resp:{record.id}", json.dumps(data), ex=self._c.ttl_s)

    async def get(self, response_id: str) -> Record | None:
        """The record, its events read from its log when it leaves them there (a background response's)."""
        async with self._c.errors(), self._r.pipeline(transaction=False) as pipe:
            pipe.get(f"{self._p}resp:{response_id}")
            pipe.lrange(f"{self._p}events:{response_id}", 0, -1)
            raw, logged = await pipe.execute()
        if not raw:
            return None
        record = Record(**json.loads(raw))
        if not record.events:
            record.events = [json.loads(e) for e in logged]
        return record

    async def delete(self, response_id: str) -> bool:
        record = await self.get(response_id)
        async with self._c.errors():
            await self._r.zrem(f"{self._p}index", response_id)
            if record is not None:
                await self._r.zrem(f"{self._p}index:{record.owner}", response_id)
            await self._r.delete(f"{self._p}events:{response_id}")
            return bool(await self._r.delete(f"{self._p}resp:{response_id}"))

    async def touch_conversation(self, conversation: str, urls: set[str]) -> None:
        key = f"{self._p}conv:{conversation}"
        async with self._c.errors(), self._r.pipeline(transaction=True) as pipe:
            if urls:
                pipe.sadd(key, *urls)
            pipe.expire(key, self._c.ttl_s)
            pipe.zadd(f"{self._p}conv-idle", {conversation: time.time()})
            await pipe.execute()

    async def idle_conversations(self, idle_s: float) -> list[tuple[str, set[str]]]:
        """Idle conversations this replica has claimed (removed from `conv-idle` by its own ZREM)."""
        idle = f"{self._p}conv-idle"
        out = []
        async with self._c.errors():
            for raw in await self._r.zrangebyscore(idle, 0, time.time() - idle_s):
                if not await self._r.zrem(idle, raw):
                    continue  # another replica claimed it first
                conv = raw.decode()
                urls = {u.decode() for u in await self._r.smembers(f"{self._p}conv:{conv}")}
                out.append((conv, urls))
        return out

    async def forget_conversation(self, conversation: str) -> None:
        async with self._c.errors():
            await self._r.zrem(f"{self._p}conv-idle", conversation)
            await self._r.delete(f"{self._p}conv:{conversation}")


_HOLD = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""
_APPEND = """
local current = redis.call('get', KEYS[1])
if current and current ~= ARGV[1] then return 0 end
if redis.call('llen', KEYS[2]) ~= tonumber(ARGV[2]) then return 0 end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[3])
for i = 5, #ARGV, 1000 do redis.call('rpush', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV))) end
redis.call('expire', KEYS[2], ARGV[4])
return 1
"""
"""Events ARGV[5..] appended to log KEYS[2] while the hold KEYS[1] is holder ARGV[1]'s (renewed for ARGV[3] ms)
or free (taken again: it lapsed and no replica adopted it), and the log ends at ARGV[2]; 0 otherwise. The log
expires ARGV[4] s after its last append, as the record does after its last write."""
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
    the fleet-wide one (`cnv-index`) refuses new ones at `max_responses` (`ADMIT`)."""

    def __init__(self, connection: Connection) -> None:
        self._c = connection
        self._r, self._p = connection.client, connection.prefix

    def _keys(self, conv_id: str) -> tuple[str, str, str]:
        return f"{self._p}cnv:{conv_id}", f"{self._p}cnv-order:{conv_id}", f"{self._p}cnv-items:{conv_id}"

    async def put(self, conv: Conversation) -> None:
        prefixes = list(self._keys(""))  # the keys a conversation's id goes under
        await self._c.admit("cnv-index", "conversations", conv.owner, conv.id, prefixes)
        async with self._c.errors(), self._r.pipeline(transaction=True) as pipe:
            pipe.set(self._keys(conv.id)[0], json.dumps(asdict(conv)))
            self._refresh(pipe, conv.id)
            await pipe.execute()

    def _refresh(self, pipe: Any, conv_id: str) -> None:
        for key in self._keys(conv_id):
            pipe.expire(key, self._c.ttl_s)
        record = self._keys(conv_id)[0]
        pipe.eval(_TOUCH, 2, record, f"{self._p}cnv-index", time.time(), conv_id, f"{self._p}cnv-index:")

    async def get(self, conv_id: str) -> Conversation | None:
        async with self._c.errors():
            raw = await self._r.get(self._keys(conv_id)[0])
        return Conversation(**json.loads(raw)) if raw else None

    async def delete(self, conv_id: str) -> bool:
        conv = await self.get(conv_id)
        async with self._c.errors():
            await self._r.zrem(f"{self._p}cnv-index", conv_id)
            if conv is not None:
                await self._r.zrem(f"{self._p}cnv-index:{conv.owner}", conv_id)
            await self._r.delete(*self._keys(conv_id))
            return conv is not None

    async def add_items(self, conv_id: str, items: list[dict[str, Any]]) -> None:
        _, order, by_id = self._keys(conv_id)
        async with self._c.errors(), self._r.pipeline(transaction=True) as pipe:
            pipe.rpush(order, *(i["id"] for i in items))
            pipe.hset(by_id, mapping={i["id"]: json.dumps(i) for i in items})
            self._refresh(pipe, conv_id)
            await pipe.execute()

    async def items(self, conv_id: str) -> list[dict[str, Any]]:
        _, order, by_id = self._keys(conv_id)
        async with self._c.errors():
            ids = await self._r.lrange(order, 0, -1)
            values = await self._r.hmget(by_id, ids) if ids else []
        return [json.loads(v) for v in values if v is not None]

    async def hold(self, conv_id: str, token: str, lease_s: float) -> bool:
        """Taken when free (`SET NX PX`), extended when ours, in one script so no other replica slips between."""
        async with self._c.errors():
            return bool(await self._r.eval(_HOLD, 1, f"{self._p}cnv-lease:{conv_id}", token, int(lease_s * 1000)))

    async def release(self, conv_id: str, token: str) -> None:
        async with self._c.errors():
            await self._r.eval(_RELEASE, 1, f"{self._p}cnv-lease:{conv_id}", token)

    async def delete_item(self, conv_id: str, item_id: str) -> bool:
        _, order, by_id = self._keys(conv_id)
        async with self._c.errors(), self._r.pipeline(transaction=True) as pipe:
            pipe.lrem(order, 0, item_id)
            pipe.hdel(by_id, item_id)
            removed, _ = await pipe.execute()
        return bool(removed)


class RedisObjects:
    """Objects as keys expiring with them, a sorted set per owner for listing, and an expiry index per kind
    from which a replica claims an expired id by removing it (ZREM), as idle conversations are claimed."""

    def __init__(self, connection: Connection) -> None:
        self._c = connection
        self._r, self._p = connection.client, connection.prefix

    def _key(self, kind: str, obj_id: str) -> str:
        return f"{self._p}obj:{kind}:{obj_id}"

    async def put(self, kind: str, obj: Obj) -> None:
        async with self._c.errors(), self._r.pipeline(transaction=True) as pipe:
            pipe.set(self._key(kind, obj["id"]), json.dumps(obj), exat=max(1, int(obj["expires_at"]) + 1))
            pipe.zadd(f"{self._p}owned:{kind}:{obj['owner']}", {obj["id"]: time.time()}, nx=True)
            pipe.zadd(f"{self._p}expiry:{kind}", {obj["id"]: obj["expires_at"]})
            await pipe.execute()

    async def get(self, kind: str, obj_id: str) -> Obj | None:
        async with self._c.errors():
            raw = await self._r.get(self._key(kind, obj_id))
        obj: Obj | None = json.loads(raw) if raw else None
        return obj if obj and obj["expires_at"] > time.time() else None

    async def delete(self, kind: str, obj_id: str) -> bool:
        obj = await self.get(kind, obj_id)
        async with self._c.errors(), self._r.pipeline(transaction=True) as pipe:
            pipe.delete(self._key(kind, obj_id))
            pipe.zrem(f"{self._p}expiry:{kind}", obj_id)
            if obj is not None:
                pipe.zrem(f"{self._p}owned:{kind}:{obj['owner']}", obj_id)
            deleted, *_ = await pipe.execute()
        return bool(deleted)

    async def owned(self, kind: str, owner: str) -> list[Obj]:
        index = f"{self._p}owned:{kind}:{owner}"
        async with self._c.errors():
            ids = [i.decode() for i in await self._r.zrange(index, 0, -1)]
            raws = await self._r.mget([self._key(kind, i) for i in ids]) if ids else []
            if gone := [i for i, raw in zip(ids, raws, strict=True) if raw is None]:
                await self._r.zrem(index, *gone)
        now = time.time()
        return [o for o in (json.loads(raw) for raw in raws if raw is not None) if o["expires_at"] > now]

    async def take_expired(self, kind: str) -> list[str]:
        expiry = f"{self._p}expiry:{kind}"
        async with self._c.errors():
            ids = [i.decode() for i in await self._r.zrangebyscore(expiry, 0, time.time())]
            return [i for i in ids if await self._r.zrem(expiry, i)]  # another replica may claim one first


class RedisStores:
    """The three stores in the Redis at `url`, under `prefix` (replicas sharing them use the same), over one
    client."""

    def __init__(
        self,
        url: str,
        *,
        max_responses: int = 10_000,
        per_key: int = 1_000,
        ttl_s: float = 30 * 86400,
        prefix: str = "toolfleet:",
    ) -> None:
        self.connection = Connection(url, max_responses=max_responses, per_key=per_key, ttl_s=ttl_s, prefix=prefix)
        self.responses = RedisResponses(self.connection)
        self.conversations = RedisConversations(self.connection)
        self.objects = RedisObjects(self.connection)
        self.usage = RedisUsage(self.connection)
        self.roster = RedisRoster(self.connection)

    @classmethod
    def from_settings(cls, settings: OrchestratorSettings) -> RedisStores:
        return cls(
            settings.redis_url or "redis://127.0.0.1:6379/0",
            max_responses=settings.max_responses,
            per_key=settings.max_responses_per_key,
            ttl_s=settings.retention_s,
            prefix=settings.redis_prefix,
        )

    async def check(self) -> None:
        async with self.connection.errors():
            await self.connection.client.ping()

    async def aclose(self) -> None:
        await self.connection.client.aclose()
