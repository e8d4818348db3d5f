"""What a legacy SSE connection has to write to its client, bounded in messages and in bytes.

Legacy SSE answers a POSTed message `202` at once and writes its answer later, on the connection's event
stream. A client that posts and never reads that stream used to make the gateway hold every answer (300
answers of 64 KiB were accepted; 1 MiB ones grew the process by 100 MB). Here the answers wait in an
`Outbox` whose bytes are bounded: past the bound, a forwarded call waits to put its answer (so the upstream
is read no faster than the client reads), and the connection admits no new message while it holds
`max_pending` of them or its queue is full, so a POST is refused (`Backlogged`, HTTP 429) instead of
buffered. What one connection can hold is about `max_queued_bytes`, plus one answer per pending message.
"""

from __future__ import annotations

from collections import deque

import anyio

from gateway.config import LegacySseConfig
from gateway.errors import RateLimited

MAX_ITEMS = 1024
"""Events queued at most, however small (keep-alives, progress notifications)."""


class Backlogged(RateLimited):
    """The client does not read its event stream as fast as it posts: its message is refused, not buffered."""


class Outbox:
    """The events one SSE connection has yet to write, and the messages it has admitted and not finished."""

    def __init__(self, cfg: LegacySseConfig) -> None:
        self._items: deque[bytes] = deque()
        self._changed = anyio.Event()
        self._max_bytes = cfg.max_queued_bytes
        self._max_pending = cfg.max_pending
        self.queued_bytes = 0
        self.pending = 0
        """Messages admitted whose forwarding has not finished (their answers may still be coming)."""

    def __len__(self) -> int:
        return len(self._items)

    def admit(self, session: str) -> None:
        """Take one more message, or refuse it while the connection holds as much as it may."""
        if self.pending >= self._max_pending or self.queued_bytes >= self._max_bytes:
            raise Backlogged(
                f"SSE session {session!r} is not read as fast as it posts: {self.pending} messages in flight and"
                f" {self.queued_bytes} bytes unread; read its event stream, then post again"
            )
        self.pending += 1

    def finished(self) -> None:
        """One admitted message is done with."""
        self.pending -= 1

    async def put(self, event: bytes) -> None:
        """Queue one event, waiting while the queue is full (back-pressure onto whoever produced it)."""
        while self._items and (self.queued_bytes >= self._max_bytes or len(self._items) >= MAX_ITEMS):
            await self._changed.wait()
        self._items.append(event)
        self.queued_bytes += len(event)
        self._wake()

    async def get(self) -> bytes:
        """The next event to write, once there is one."""
        while not self._items:
            await self._changed.wait()
        event = self._items.popleft()
        self.queued_bytes -= len(event)
        self._wake()
        return event

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
