"""The tool calls this replica ran, as they finish (namespace, tool, latency, outcome, trace id): the last
`KEEP` kept for a page that loads, and each handed to the live watchers (the console's SSE stream).

Memory is bounded on every side: the ring holds `KEEP` calls, each watcher's queue `QUEUE` (a watcher that
does not read loses its oldest calls, never slows a tool call), and at most `WATCHERS` watch at once. With a
`relay` (a shared store's pub/sub) each call is also published for the fleet, and the calls the other replicas
publish come in through `deliver`, so every replica's ring and watchers see the whole fleet's calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Iterator
from typing import Protocol

from pydantic import BaseModel

from toolkit.tracing import current_trace_id

KEEP = 50
QUEUE = 100
WATCHERS = 32


class ToolCallSeen(BaseModel):
    """One finished tool call as an operator reads it (and as it crosses the relay)."""

    at: float  # Unix seconds, when it finished
    namespace: str
    tool: str
    latency_ms: float
    outcome: str  # ToolOutcome.kind: ok, error, rejected, ...
    response_id: str
    trace_id: str | None  # the OTel trace (None: tracing is off)
    replica: str  # the replica that ran it


class Relay(Protocol):
    """Where calls are published for the other replicas (`persist.redis.CallRelay`)."""

    def publish(self, call: ToolCallSeen) -> None: ...


class TooManyWatchers(Exception):
    """`WATCHERS` streams are open already: a new one is refused rather than grow without bound."""


class CallFeed:
    """One replica's feed of finished tool calls; `replica` names it on each call."""

    def __init__(self, replica: str) -> None:
        self.replica = replica
        self.recent: deque[ToolCallSeen] = deque(maxlen=KEEP)  # newest first
        self.relay: Relay | None = None
        self._watchers: set[asyncio.Queue[ToolCallSeen]] = set()

    @property
    def watching(self) -> int:
        return len(self._watchers)

    def record(self, namespace: str, tool: str, started: float, outcome: str, response_id: str) -> None:
        """A call of this replica finished (`started`: its `time.perf_counter()` at the start)."""
        latency_ms = round((time.perf_counter() - started) * 1000, 1)
        call = ToolCallSeen(
            at=time.time(),
            namespace=namespace,
            tool=tool,
            latency_ms=latency_ms,
            outcome=outcome,
            response_id=response_id,
            trace_id=current_trace_id(),
            replica=self.replica,
        )
        self.deliver(call)
        if self.relay is not None:
            self.relay.publish(call)

    def deliver(self, call: ToolCallSeen) -> None:
        """Keep `call` and hand it to every watcher; a full watcher's oldest call makes room."""
        self.recent.appendleft(call)
        for queue in self._watchers:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(call)

    @contextlib.contextmanager
    def watch(self) -> Iterator[asyncio.Queue[ToolCallSeen]]:
        """A queue of the calls finishing from now on, while the `with` lasts."""
        if len(self._watchers) >= WATCHERS:
            raise TooManyWatchers(f"{WATCHERS} streams of tool calls are open on this replica already")
        queue: asyncio.Queue[ToolCallSeen] = asyncio.Queue(QUEUE)
        self._watchers.add(queue)
        try:
            yield queue
        finally:
            self._watchers.discard(queue)
