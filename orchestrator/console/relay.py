"""The tool-call feed made fleet-wide over a Redis store: each replica publishes the calls it runs on one
channel (`PREFIX` + `toolcalls`) and delivers the other replicas' calls to its own feed, so every replica's
Live page shows the whole fleet's calls. Pub/sub, not a list: nothing is kept in Redis; a replica's ring
(`callfeed.KEEP`) holds the fleet's calls since it started.

Publishing never waits on Redis: a call goes to a bounded outbox (`OUTBOX`, the oldest dropped when full)
that one task sends. A Redis that goes away loses calls for the other replicas only, logged once per loss.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import structlog
from pydantic import ValidationError
from redis.exceptions import RedisError

from orchestrator.callfeed import CallFeed, ToolCallSeen

log = structlog.get_logger(__name__)
OUTBOX = 1000
RESUBSCRIBE_S = 1.0


class RedisRelay:
    """Bridges one replica's `CallFeed` and the fleet's channel on the Redis behind `client`."""

    def __init__(self, client: Any, channel: str, feed: CallFeed) -> None:
        self._client, self.channel, self._feed = client, channel, feed
        self._outbox: asyncio.Queue[ToolCallSeen] = asyncio.Queue(OUTBOX)

    def publish(self, call: ToolCallSeen) -> None:
        if self._outbox.full():
            self._outbox.get_nowait()
        self._outbox.put_nowait(call)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Subscribed before the app serves (no call published after start-up is missed), sending and
        receiving while it does."""
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        await pubsub.subscribe(self.channel)
        tasks = [asyncio.create_task(self._receive(pubsub)), asyncio.create_task(self._send())]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await pubsub.aclose()

    async def _send(self) -> None:
        while True:
            call = await self._outbox.get()
            try:
                await self._client.publish(self.channel, call.model_dump_json())
            except RedisError as exc:
                log.warning("callfeed.publish_failed", error=str(exc) or type(exc).__name__)

    async def _receive(self, pubsub: Any) -> None:
        while True:
            try:
                async for message in pubsub.listen():
                    self._take(message["data"])
            except RedisError as exc:
                log.warning("callfeed.subscription_lost", error=str(exc) or type(exc).__name__)
                await asyncio.sleep(RESUBSCRIBE_S)  # a pause before trying the Redis again, not a wait on an event
                with contextlib.suppress(RedisError):
                    await pubsub.subscribe(self.channel)

    def _take(self, data: bytes) -> None:
        """Another replica's call to this replica's feed (this replica's own were delivered as they finished)."""
        try:
            call = ToolCallSeen.model_validate_json(data)
        except ValidationError:
            log.warning("callfeed.unreadable", size=len(data))
            return
        if call.replica != self._feed.replica:
            self._feed.deliver(call)
