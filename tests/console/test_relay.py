"""The tool-call relay over a real Redis (`orchestrator/console/relay.py`), without a fleet: its outbox keeps the
newest calls when Redis is slower than the calls come, and its subscription comes back after Redis was lost."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

from structlog.testing import capture_logs

from orchestrator.callfeed import CallFeed, ToolCallSeen
from orchestrator.console.relay import OUTBOX, RedisRelay
from tests.support.asgi import free_port
from tests.support.redis import redis_server
from toolkit.redis_client import redis_client

BOUND_S = 120  # each test's whole run: a Redis that stops answering fails the test here, naming the wait


def _call(tool: str, replica: str) -> ToolCallSeen:
    return ToolCallSeen(
        at=time.time(),
        namespace="fixture",
        tool=tool,
        latency_ms=1.0,
        outcome="ok",
        response_id="resp_relay",
        trace_id=None,
        replica=replica,
    )


async def test_the_outbox_drops_the_oldest_calls_when_it_is_full() -> None:
    channel = f"relay-{uuid.uuid4().hex[:8]}"
    with redis_server() as url:
        client, listener = redis_client(url), redis_client(url).pubsub(ignore_subscribe_messages=True)
        try:
            async with asyncio.timeout(BOUND_S):
                await listener.subscribe(channel)
                relay = RedisRelay(client, channel, CallFeed("replica_here"))
                for n in range(OUTBOX + 5):  # before its sender runs: Redis is slower than the calls
                    relay.publish(_call(f"t{n}", "replica_here"))
                async with relay.running():
                    sent = [await _message(listener) for _ in range(OUTBOX)]
            assert [c.tool for c in sent] == [f"t{n}" for n in range(5, OUTBOX + 5)]  # the newest, in order
        finally:
            await listener.aclose()
            await client.aclose()


async def _message(listener: object) -> ToolCallSeen:
    """The next call published on the channel `listener` subscribed to."""
    for _ in range(100):
        message = await listener.get_message(ignore_subscribe_messages=True, timeout=1)  # type: ignore[attr-defined]
        if message is not None:
            return ToolCallSeen.model_validate_json(message["data"])
    raise AssertionError("no call was published")


async def test_the_relay_subscribes_again_once_redis_is_back() -> None:
    channel, port = f"relay-{uuid.uuid4().hex[:8]}", free_port()
    feed = CallFeed("replica_here")
    with capture_logs() as logs, contextlib.ExitStack() as outage:
        url = outage.enter_context(redis_server(port))
        client = redis_client(url)
        try:
            async with asyncio.timeout(BOUND_S), RedisRelay(client, channel, feed).running():
                with feed.watch() as queue:
                    await _arrives(url, channel, queue, "before")
                    outage.close()  # Redis gone, past the client's own retries: the subscription is lost
                    await _logged(logs, "callfeed.subscription_lost")
                    with redis_server(port):  # back, empty
                        await _arrives(url, channel, queue, "after")
        finally:
            await client.aclose()
    assert [e["event"] for e in logs].count("callfeed.subscription_lost") >= 1


async def _logged(logs: list[dict[str, object]], event: str) -> None:
    for _ in range(200):
        if any(e["event"] == event for e in logs):
            return
        await asyncio.sleep(0.1)  # a wait for the relay's own log line, bounded
    raise AssertionError(f"{event} was never logged")


async def _arrives(url: str, channel: str, queue: asyncio.Queue[ToolCallSeen], tool: str) -> None:
    """Another replica's call published until the relay hands it to the feed's watcher (a publication made
    before the relay subscribed again is lost: pub/sub keeps nothing)."""
    publisher = redis_client(url)
    try:
        for _ in range(100):
            await publisher.publish(channel, _call(tool, "replica_there").model_dump_json())
            with contextlib.suppress(TimeoutError):
                while (await asyncio.wait_for(queue.get(), 0.2)).tool != tool:
                    pass
                return
        raise AssertionError(f"the call {tool!r} never reached the feed")
    finally:
        await publisher.aclose()
