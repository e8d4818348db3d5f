"""The pin table contract, run on both stores: in memory and in a real redis-server."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest

from gateway.keys import SessionKey
from gateway.store import MemoryStore, Pin, RedisStore, SessionRecord, Store
from tests.support.asgi import free_port
from tests.support.redis import redis_server


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server")
    with redis_server() as url:
        yield url


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    url = request.getfixturevalue("redis_url")
    redis = RedisStore(url, prefix=f"test:{id(request)}:")
    try:
        yield redis
    finally:
        await redis.aclose()


async def test_a_pin_is_claimed_once_counted_lost_and_dropped(store: Store) -> None:
    assert await store.claim_pin("ns", SessionKey("header", "a"), "r1") == Pin("r1")
    assert await store.claim_pin("ns", SessionKey("header", "a"), "r2") == Pin("r1")  # the first claim holds
    await store.claim_pin("ns", SessionKey("header", "b"), "r2")
    await store.claim_pin("ns", SessionKey("header", "c"), "r2")
    assert await store.counts("ns") == {"r1": 1, "r2": 2}
    assert await store.mark_lost("ns", "r2") == 2
    assert await store.mark_lost("ns", "r2") == 0
    assert await store.get_pin("ns", SessionKey("header", "b")) == Pin("r2", lost=True)
    assert await store.drop_pin("ns", SessionKey("header", "b")) == Pin("r2", lost=True)
    assert await store.drop_pin("ns", SessionKey("header", "b")) is None
    assert await store.counts("ns") == {"r1": 1, "r2": 1}
    assert await store.get_pin("other", SessionKey("header", "a")) is None


async def test_idle_pins_are_those_not_touched_lately(store: Store) -> None:
    await store.claim_pin("idle", SessionKey("header", "old"), "r1")
    await anyio.sleep(0.3)
    await store.claim_pin("idle", SessionKey("header", "new"), "r1")
    await store.touch("idle", SessionKey("header", "new"))
    assert [k for k, _ in await store.idle_pins("idle", 0.2)] == [SessionKey("header", "old")]


async def test_sessions_and_blobs_round_trip(store: Store) -> None:
    record = SessionRecord("ns", SessionKey("session", "abc"), "http://r1/mcp", "up-1")
    await store.put_session("abc", record)
    assert await store.get_session("abc") == record
    await store.drop_session("abc")
    assert await store.get_session("abc") is None
    await store.put_blob("tools:ns", {"echo": "hash"})
    assert await store.get_blob("tools:ns") == {"echo": "hash"}


async def test_redis_reads_what_an_older_gateway_wrote_and_writes_what_it_reads(redis_url: str) -> None:
    """Pins and session records in the stored string form (`h:` / `s:`, `keyed_by_header`) of older
    gateways: a rolling upgrade shares one Redis pin table both ways."""
    import json

    import redis.asyncio as redis

    prefix = f"test:compat:{id(redis_url)}:"
    raw = redis.from_url(redis_url, decode_responses=True)
    store = RedisStore(redis_url, prefix=prefix)
    try:
        await raw.hset(f"{prefix}pin:ns", "h:conv:1", json.dumps({"replica": "r1", "lost": False}))
        await raw.zadd(f"{prefix}used:ns", {"h:conv:1": 0})
        old = {"namespace": "ns", "key": "s:abc", "replica": "r1", "upstream_sid": "up", "keyed_by_header": False}
        await raw.set(f"{prefix}sess:abc", json.dumps(old))
        assert await store.get_pin("ns", SessionKey("header", "conv:1")) == Pin("r1")
        assert [k for k, _ in await store.idle_pins("ns", 1)] == [SessionKey("header", "conv:1")]
        assert await store.get_session("abc") == SessionRecord("ns", SessionKey("session", "abc"), "r1", "up")
        await store.put_session("def", SessionRecord("ns", SessionKey("header", "x"), None, None))
        assert json.loads(await raw.get(f"{prefix}sess:def")) == {
            "namespace": "ns",
            "key": "h:x",
            "replica": None,
            "upstream_sid": None,
            "keyed_by_header": True,
        }
        await store.claim_pin("ns", SessionKey("session", "abc"), "r2")
        assert await raw.hexists(f"{prefix}pin:ns", "s:abc")
    finally:
        await raw.delete(*[k async for k in raw.scan_iter(f"{prefix}*")])
        await raw.aclose()
        await store.aclose()


def test_a_session_key_round_trips_through_its_stored_form() -> None:
    handle, retry = SessionKey.handle("python.n0nce.m4c"), SessionKey.retry("opaque state")
    for key in (SessionKey("header", "conv:1"), SessionKey("session", "abc"), SessionKey("header", ""), handle, retry):
        assert SessionKey.parse(str(key)) == key
    assert str(handle) == "k:python.n0nce.m4c" and not handle.by_header and not handle.by_session
    assert str(retry).startswith("r:") and "opaque" not in str(retry) and retry == SessionKey.retry("opaque state")
    assert str(SessionKey("header", "a")) == "h:a" and SessionKey("header", "a").by_header
    assert str(SessionKey.session("b")) == "s:b" and not SessionKey.session("b").by_header
    assert SessionKey.header(None) is None and SessionKey.header("") is None
    for bad in ("x:1", "h", "", "sabc"):
        with pytest.raises(ValueError, match="not a session key"):
            SessionKey.parse(bad)


async def test_the_redis_pin_store_answers_at_once_after_redis_restarted() -> None:
    """Every pooled connection died with the old Redis: the first calls after it came back must not fail (each
    failed one call, answered "shared store (Redis) unavailable", while Redis was already back)."""
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server")
    port = free_port()
    with redis_server(port) as url:
        store = RedisStore(url, prefix="test:restart:")
        async with anyio.create_task_group() as tg:  # several pooled connections
            for i in range(4):
                tg.start_soon(store.claim_pin, "python", SessionKey.header(f"before{i}"), "http://r1")
    try:
        with redis_server(port):  # back, empty (no persistence)
            for i in range(4):  # as many as there are pooled connections
                assert (
                    await store.claim_pin("python", SessionKey.header(f"after{i}"), "http://r1")
                ).replica == "http://r1"
            assert await store.get_pin("python", SessionKey.header("before0")) is None
    finally:
        await store.aclose()
