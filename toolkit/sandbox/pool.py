"""The warm pool: sandboxes kept ready so a new session starts at once."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

import structlog

from toolkit.sandbox.engine import SandboxError
from toolkit.sandbox.runtime import HELD, WARM, ContainerRuntime

log = structlog.get_logger(__name__)


class Pooled(Protocol):
    container_id: str

    async def aclose(self) -> None: ...


P = TypeVar("P", bound=Pooled)

RETRY_S = 2.0
"""Pause before a failed refill of the pool is tried again (the engine is down, the image missing)."""


class WarmPool(Generic[P]):
    """Keeps `size` sandboxes ready so a new session starts at once.

    Refills one at a time; but while takers wait on an empty pool it starts up to `burst` at once, and a taker
    is handed the first sandbox to come up (one the refill started too) rather than waiting on a start of its
    own. It never starts more than its waiting takers and its refill need, so bursts stay within the session
    limit that bounds the takers; a sandbox whose taker gave up fills the pool, or is removed past its size."""

    def __init__(self, spawn: Callable[[], Awaitable[P]], size: int, runtime: ContainerRuntime, *, burst: int) -> None:
        self._spawn = spawn
        self._size = size
        self._runtime = runtime
        self._burst = burst
        self._ready: collections.deque[P] = collections.deque()
        self._takers: collections.deque[asyncio.Future[P]] = collections.deque()
        self._starting = 0
        self._starts: set[asyncio.Task[None]] = set()
        self._closing: set[asyncio.Task[None]] = set()
        self._open = False

    def __len__(self) -> int:
        return len(self._ready)

    def start(self) -> None:
        self._open = True
        self._top_up()

    async def take(self) -> P:
        """A ready sandbox when one is waiting, else the first one started to come up."""
        if not self._open:
            raise SandboxError("the sandbox pool is not running (the server is starting or shutting down)")
        if self._ready:
            item = self._ready.popleft()
            self._runtime.mark(item.container_id, HELD)
            self._top_up()
            return item
        taker: asyncio.Future[P] = asyncio.get_running_loop().create_future()
        self._takers.append(taker)
        self._top_up()
        try:
            return await taker
        except asyncio.CancelledError:
            if taker.done() and not taker.cancelled() and taker.exception() is None:
                self._deliver(taker.result())  # handed over as this taker was cancelled: keep it for the next
            with contextlib.suppress(ValueError):
                self._takers.remove(taker)
            raise

    async def fresh(self, spawn: Callable[[], Awaitable[P]]) -> P:
        """A sandbox of another kind than the pool's (another size), started for one taker."""
        item = await spawn()
        self._runtime.mark(item.container_id, HELD)
        return item

    def _waiting(self) -> int:
        return sum(not taker.done() for taker in self._takers)

    def _top_up(self) -> None:
        """Start what the waiting takers and the refill need: up to `burst` at once while takers wait, else one."""
        if not self._open:
            return
        waiting = self._waiting()
        needed = waiting + max(self._size - len(self._ready), 0)
        limit = self._burst if waiting else 1
        while self._starting < min(needed, limit):
            self._starting += 1
            task = asyncio.create_task(self._start_one())
            self._starts.add(task)
            task.add_done_callback(self._starts.discard)

    async def _start_one(self) -> None:
        try:
            item = await self._spawn()
        except Exception as exc:
            self._starting -= 1
            log.warning("pool.start_failed", error=str(exc))
            if not self._fail_one(exc):
                await asyncio.sleep(RETRY_S)  # only a refill failed: back off before the next try
        else:
            self._starting -= 1
            self._deliver(item)
        self._top_up()

    def _next_taker(self) -> asyncio.Future[P] | None:
        """The oldest taker still waiting; those that gave up are dropped on the way."""
        while self._takers:
            taker = self._takers.popleft()
            if not taker.done():
                return taker
        return None

    def _fail_one(self, exc: Exception) -> bool:
        """The oldest waiting taker gets the failure (its session fails with it, as a start of its own would)."""
        if (taker := self._next_taker()) is None:
            return False
        taker.set_exception(exc)
        return True

    def _deliver(self, item: P) -> None:
        """Hand a new sandbox to the oldest waiting taker, else keep it warm, else (past the size) remove it."""
        if (taker := self._next_taker()) is not None:
            self._runtime.mark(item.container_id, HELD)
            taker.set_result(item)
            return
        if len(self._ready) < self._size and self._open:
            self._runtime.mark(item.container_id, WARM)
            self._ready.append(item)
            return
        task = asyncio.create_task(item.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        self._open = False
        while self._fail_one(SandboxError("the server is shutting down")):
            pass
        for task in list(self._starts):
            task.cancel()
        for task in list(self._starts):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.gather(*self._closing)
        ready, self._ready = list(self._ready), collections.deque()
        await asyncio.gather(*(sandbox.aclose() for sandbox in ready))
