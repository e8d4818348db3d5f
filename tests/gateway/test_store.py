"""The pin table contract, run on both stores: in memory and in a real redis-server."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator

import anyio
import pytest

from gateway.store import MemoryStore, Pin, RedisStore, SessionRecord, Store
from tests.gateway.harness import redis_server


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
    assert await store.claim_pin("ns", "h:a", "r1") == Pin("r1")
    assert await store.claim_pin("ns", "h:a", "r2") == Pin("r1")  # the first claim holds
    await store.claim_pin("ns", "h:b", "r2")
    await store.claim_pin("ns", "h:c", "r2")
    assert await store.counts("ns") == {"r1": 1, "r2": 2}
    assert await store.mark_lost("ns", "r2") == 2
    assert await store.mark_lost("ns", "r2") == 0
    assert await store.get_pin("ns", "h:b") == Pin("r2", lost=True)
    assert await store.drop_pin("ns", "h:b") == Pin("r2", lost=True)
    assert await store.drop_pin("ns", "h:b") is None
    assert await store.counts("ns") == {"r1": 1, "r2": 1}
    assert await store.get_pin("other", "h:a") is None


async def test_idle_pins_are_those_not_touched_lately(store: Store) -> None:
    await store.claim_pin("idle", "h:old", "r1")
    await anyio.sleep(0.3)
    await store.claim_pin("idle", "h:new", "r1")
    await store.touch("idle", "h:new")
    assert [k for k, _ in await store.idle_pins("idle", 0.2)] == ["h:old"]


async def test_sessions_and_blobs_round_trip(store: Store) -> None:
    record = SessionRecord("ns", "s:abc", "http://r1/mcp", "up-1", keyed_by_header=False)
    await store.put_session("abc", record)
    assert await store.get_session("abc") == record
    await store.drop_session("abc")
    assert await store.get_session("abc") is None
    await store.put_blob("tools:ns", {"echo": "hash"})
    assert await store.get_blob("tools:ns") == {"echo": "hash"}
