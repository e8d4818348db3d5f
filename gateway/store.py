"""The pin table: which replica holds each session, plus MCP session records and small shared blobs.

In memory by default; Redis when configured, so several gateway replicas and restarts share it.
Pins are keyed by `SessionKey`; only the Redis store turns keys into their stored string form and back.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from gateway.keys import SessionKey
from toolkit import registry
from toolkit.redis_client import redis_client


@dataclass(frozen=True, slots=True)
class Pin:
    replica: str
    lost: bool = False
    drained: bool = False
    """Lost because its replica drained (went away on purpose): the next call places the session again."""


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A client's MCP session on the gateway: its namespace, session key, replica and upstream session id."""

    namespace: str
    key: SessionKey
    replica: str | None
    upstream_sid: str | None


class Store(Protocol):
    async def get_pin(self, ns: str, key: SessionKey) -> Pin | None: ...
    async def claim_pin(self, ns: str, key: SessionKey, replica: str) -> Pin:
        """Pin `key` to `replica` unless it is pinned already; returns the pin that holds."""
        ...

    async def drop_pin(self, ns: str, key: SessionKey) -> Pin | None: ...
    async def touch(self, ns: str, key: SessionKey) -> None: ...
    async def counts(self, ns: str) -> dict[str, int]: ...
    async def mark_lost(self, ns: str, replica: str, *, drained: bool = False) -> int: ...
    async def lose(self, ns: str, key: SessionKey) -> None:
        """Mark one session lost (its replica forgot it)."""
        ...

    async def idle_pins(self, ns: str, idle_s: float) -> list[tuple[SessionKey, Pin]]: ...
    async def get_session(self, sid: str) -> SessionRecord | None: ...
    async def put_session(self, sid: str, record: SessionRecord) -> None: ...
    async def drop_session(self, sid: str) -> None: ...
    async def get_blob(self, name: str) -> Any: ...
    async def put_blob(self, name: str, value: Any) -> None: ...
    async def aclose(self) -> None: ...


class MemoryStore:
    """One gateway process's pin table; blobs (tool approvals, discovery answers) optionally kept in a file."""

    def __init__(self, state_file: str | None = None) -> None:
        self._state_file = Path(state_file) if state_file else None
        self._pins: dict[str, dict[SessionKey, Pin]] = {}
        self._used: dict[tuple[str, SessionKey], float] = {}
        self._sessions: dict[str, SessionRecord] = {}
        self._blobs: dict[str, Any] = {}
        self._counts: dict[str, dict[str, int]] = {}
        if self._state_file is not None and self._state_file.exists():
            self._blobs = json.loads(self._state_file.read_text())

    @classmethod
    def open(cls, url: str, state_file: str | None) -> MemoryStore:
        return cls(state_file)

    async def get_pin(self, ns: str, key: SessionKey) -> Pin | None:
        return self._pins.get(ns, {}).get(key)

    async def claim_pin(self, ns: str, key: SessionKey, replica: str) -> Pin:
        pins = self._pins.setdefault(ns, {})
        self._used[ns, key] = time.time()
        if key not in pins:
            pins[key] = Pin(replica)
            counts = self._counts.setdefault(ns, {})
            counts[replica] = counts.get(replica, 0) + 1
        return pins[key]

    async def drop_pin(self, ns: str, key: SessionKey) -> Pin | None:
        self._used.pop((ns, key), None)
        pin = self._pins.get(ns, {}).pop(key, None)
        if pin is not None:
            self._counts[ns][pin.replica] -= 1
        return pin

    async def touch(self, ns: str, key: SessionKey) -> None:
        if (ns, key) in self._used:
            self._used[ns, key] = time.time()

    async def counts(self, ns: str) -> dict[str, int]:
        return dict(self._counts.get(ns, {}))

    async def mark_lost(self, ns: str, replica: str, *, drained: bool = False) -> int:
        pins = self._pins.get(ns, {})
        hit = [k for k, p in pins.items() if p.replica == replica and not p.lost]
        for key in hit:
            pins[key] = Pin(replica, lost=True, drained=drained)
        return len(hit)

    async def lose(self, ns: str, key: SessionKey) -> None:
        pins = self._pins.get(ns, {})
        if key in pins:
            pins[key] = Pin(pins[key].replica, lost=True)

    async def idle_pins(self, ns: str, idle_s: float) -> list[tuple[SessionKey, Pin]]:
        cutoff = time.time() - idle_s
        pins = self._pins.get(ns, {})
        return [(k, p) for k, p in pins.items() if self._used.get((ns, k), 0) < cutoff]

    async def get_session(self, sid: str) -> SessionRecord | None:
        return self._sessions.get(sid)

    async def put_session(self, sid: str, record: SessionRecord) -> None:
        self._sessions[sid] = record

    async def drop_session(self, sid: str) -> None:
        self._sessions.pop(sid, None)

    async def get_blob(self, name: str) -> Any:
        return self._blobs.get(name)

    async def put_blob(self, name: str, value: Any) -> None:
        self._blobs[name] = value
        if self._state_file is not None:  # small and rare (approvals, discovery changes): write it whole
            tmp = self._state_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._blobs))
            tmp.replace(self._state_file)

    async def aclose(self) -> None:
        return None


class RedisStore:
    """The pin table in Redis: `<prefix>pin:<ns>` hash, `<prefix>used:<ns>` zset, session and blob keys."""

    def __init__(self, url: str, *, prefix: str = "toolfleet:gw:", session_ttl_s: int = 86400) -> None:
        self._r = redis_client(url, decode_responses=True)
        self._p = prefix
        self._ttl = session_ttl_s

    @classmethod
    def open(cls, url: str, state_file: str | None) -> RedisStore:
        return cls(url)  # Redis keeps the blobs itself, so no state file

    async def get_pin(self, ns: str, key: SessionKey) -> Pin | None:
        raw = await self._r.hget(f"{self._p}pin:{ns}", str(key))
        return Pin(**json.loads(raw)) if raw else None

    async def claim_pin(self, ns: str, key: SessionKey, replica: str) -> Pin:
        field = str(key)
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.hsetnx(f"{self._p}pin:{ns}", field, json.dumps(asdict(Pin(replica))))
            pipe.hget(f"{self._p}pin:{ns}", field)
            pipe.zadd(f"{self._p}used:{ns}", {field: time.time()})
            created, raw, _ = await pipe.execute()
        if created:
            await self._r.hincrby(f"{self._p}count:{ns}", replica, 1)
        return Pin(**json.loads(raw))

    async def drop_pin(self, ns: str, key: SessionKey) -> Pin | None:
        field = str(key)
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.hget(f"{self._p}pin:{ns}", field)
            pipe.hdel(f"{self._p}pin:{ns}", field)
            pipe.zrem(f"{self._p}used:{ns}", field)
            raw, removed, _ = await pipe.execute()
        if not raw:
            return None
        pin = Pin(**json.loads(raw))
        if removed:
            await self._r.hincrby(f"{self._p}count:{ns}", pin.replica, -1)
        return pin

    async def touch(self, ns: str, key: SessionKey) -> None:
        await self._r.zadd(f"{self._p}used:{ns}", {str(key): time.time()}, xx=True)

    async def _all(self, ns: str) -> dict[str, Pin]:
        """Every pin of `ns` by its stored key."""
        raw = await self._r.hgetall(f"{self._p}pin:{ns}")
        return {k: Pin(**json.loads(v)) for k, v in raw.items()}

    async def counts(self, ns: str) -> dict[str, int]:
        raw = await self._r.hgetall(f"{self._p}count:{ns}")
        return {replica: int(n) for replica, n in raw.items()}

    async def mark_lost(self, ns: str, replica: str, *, drained: bool = False) -> int:
        lost = json.dumps(asdict(Pin(replica, lost=True, drained=drained)))
        hit = {k: lost for k, p in (await self._all(ns)).items() if p.replica == replica and not p.lost}
        if hit:
            await self._r.hset(f"{self._p}pin:{ns}", mapping=hit)
        return len(hit)

    async def lose(self, ns: str, key: SessionKey) -> None:
        if (pin := await self.get_pin(ns, key)) is not None:
            await self._r.hset(f"{self._p}pin:{ns}", str(key), json.dumps(asdict(Pin(pin.replica, lost=True))))

    async def idle_pins(self, ns: str, idle_s: float) -> list[tuple[SessionKey, Pin]]:
        keys = await self._r.zrangebyscore(f"{self._p}used:{ns}", 0, time.time() - idle_s)
        pins = await self._all(ns)
        return [(SessionKey.parse(k), pins[k]) for k in keys if k in pins]

    async def get_session(self, sid: str) -> SessionRecord | None:
        raw = await self._r.get(f"{self._p}sess:{sid}")
        if not raw:
            return None
        data = json.loads(raw)
        data.pop("keyed_by_header", None)  # written for older gateways, which read it; the key says as much
        return SessionRecord(**(data | {"key": SessionKey.parse(data["key"])}))

    async def put_session(self, sid: str, record: SessionRecord) -> None:
        data = asdict(record) | {"key": str(record.key), "keyed_by_header": record.key.by_header}
        await self._r.set(f"{self._p}sess:{sid}", json.dumps(data), ex=self._ttl)

    async def drop_session(self, sid: str) -> None:
        await self._r.delete(f"{self._p}sess:{sid}")

    async def get_blob(self, name: str) -> Any:
        raw = await self._r.get(f"{self._p}blob:{name}")
        return json.loads(raw) if raw else None

    async def put_blob(self, name: str, value: Any) -> None:
        await self._r.set(f"{self._p}blob:{name}", json.dumps(value))

    async def aclose(self) -> None:
        await self._r.aclose()


STORES: registry.Registry = {
    "memory": "gateway.store:MemoryStore",
    **{scheme: "gateway.store:RedisStore" for scheme in ("redis", "rediss", "unix")},
}


def open_store(url: str, state_file: str | None = None) -> Store:
    """`memory`, or the store a URL's scheme names (a redis:// URL); an unknown one stops the start-up."""
    name = url.partition("://")[0] if "://" in url else url
    store: Store = registry.load(STORES, name, "pin store").open(url, state_file)
    return store
