"""Per-session state in one place: create on first use, touch on each call, reap when idle or on shutdown.

At the session limit a new session takes the place of the least recently used idle one (its next call gets
the same reset notice as after the idle TTL), so a replica full of finished conversations still serves new
ones; only a replica whose every session is busy in a call refuses."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import anyio
import structlog

log = structlog.get_logger(__name__)


class SessionState(Protocol):
    async def aclose(self) -> None: ...


S = TypeVar("S", bound=SessionState)


class TooManySessions(Exception):
    """The server holds its maximum number of sessions, every one of them busy in a call."""


class SessionGone(Exception):
    """The session must exist already (it is named by a handle) but does not."""


@dataclass
class _Entry(Generic[S]):
    state: S
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0
    reset: str | None = None  # why the state this one replaces went (the reaper, a drained replica): told once


REAPED_MEMORY = 4096
"""How many reaped session keys are remembered, so their next call can say the state was reset."""


def idle_words(idle_s: float) -> str:
    if idle_s < 60:
        return f"{idle_s:.0f} seconds"
    return f"{idle_s / 60:.0f} minutes"


class SessionRegistry(Generic[S]):
    """Maps a session key to its state; creation is serialized per key so one key never gets two states."""

    def __init__(self, factory: Callable[[str], Awaitable[S]], *, ttl_s: float, max_sessions: int) -> None:
        self.factory = factory
        self._ttl_s = ttl_s
        self._max = max_sessions
        self._entries: dict[str, _Entry[S]] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._reaped: OrderedDict[str, float] = OrderedDict()  # key -> idle seconds when reaped, oldest first
        self._moved: dict[str, None] = {}  # keys a drained replica held, oldest first
        self._creating = 0  # sessions whose state is being made: they count against the limit already
        self.on_change: Callable[[int], None] = lambda n: None

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    async def acquire(
        self, key: str, *, create: bool = True, factory: Callable[[str], Awaitable[S]] | None = None
    ) -> S:
        """Return the session's state, creating it on first use (by `factory`, else the registry's; or raising
        SessionGone where `create` is False), and mark it busy until `release`."""
        lock = self._locks.setdefault(key, anyio.Lock())
        async with lock:
            entry = self._entries.get(key)
            if entry is None:
                if not create:
                    self._locks.pop(key, None)
                    raise SessionGone(key)
                if len(self._entries) + self._creating >= self._max and not await self._evict_least_recently_used():
                    raise TooManySessions(f"server holds its limit of {self._max} sessions, all of them busy")
                self._creating += 1
                try:
                    state = await (factory or self.factory)(key)
                finally:
                    self._creating -= 1
                entry = _Entry(state, reset=self._reset_reason(key))
                self._entries[key] = entry
                self.on_change(len(self._entries))
                log.info("session.created", session_id=key)
            entry.busy += 1
            entry.last_used = time.monotonic()
            return entry.state

    def reaped_after(self, key: str) -> float | None:
        """How long a session the reaper took had been idle; None when it was not reaped (or is forgotten)."""
        return self._reaped.get(key)

    def moved_here(self, key: str) -> None:
        """`key` was held by a replica that drained (the gateway says so): its first state here is a reset."""
        if key not in self._entries:
            self._moved[key] = None
            while len(self._moved) > REAPED_MEMORY:
                self._moved.pop(next(iter(self._moved)))

    def _reset_reason(self, key: str) -> str | None:
        if (idle_s := self._reaped.pop(key, None)) is not None:
            return f"after {idle_words(idle_s)} idle"
        if key in self._moved:
            del self._moved[key]
            return "because the server that held it shut down"
        return None

    def take_reset(self, key: str) -> str | None:
        """Why the session's previous state is gone (after how long idle, or its server shut down), when the
        state it now has replaces one; told only once."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        reason, entry.reset = entry.reset, None
        return reason

    def release(self, key: str) -> None:
        entry = self._entries.get(key)
        if entry is not None:
            entry.busy -= 1
            entry.last_used = time.monotonic()

    async def replace(self, key: str, state: S) -> None:
        """Swap a session's state (after its sandbox died); the old state is closed."""
        entry = self._entries.get(key)
        if entry is None:
            return
        old, entry.state = entry.state, state
        with anyio.CancelScope(shield=True):
            await old.aclose()

    async def close(self, key: str) -> bool:
        """Free the session (a deliberate end: its next call gets no reset notice); True when there was one."""
        self._reaped.pop(key, None)
        self._moved.pop(key, None)
        entry = self._entries.pop(key, None)
        self._locks.pop(key, None)
        if entry is None:
            return False
        self.on_change(len(self._entries))
        with anyio.CancelScope(shield=True):
            await entry.state.aclose()
        log.info("session.closed", session_id=key)
        return True

    async def reap_idle(self) -> int:
        now = time.monotonic()
        idle = [k for k, e in self._entries.items() if e.busy <= 0 and now - e.last_used > self._ttl_s]
        for key in idle:
            await self._reap(key, "session.reaped")
        return len(idle)

    async def _evict_least_recently_used(self) -> bool:
        """Make room by reaping the idle session used longest ago; False when every session is busy."""
        idle = [(e.last_used, k) for k, e in self._entries.items() if e.busy <= 0]
        if not idle:
            return False
        await self._reap(min(idle)[1], "session.evicted")
        return True

    async def _reap(self, key: str, event: str) -> None:
        """Close a session its caller did not end, remembering it so its next call hears of the reset."""
        idle_s = time.monotonic() - self._entries[key].last_used
        log.info(event, session_id=key, idle_s=round(idle_s, 1), sessions=len(self._entries), limit=self._max)
        await self.close(key)
        self._remember_reaped(key, idle_s)

    def _remember_reaped(self, key: str, idle_s: float) -> None:
        self._reaped[key] = idle_s
        self._reaped.move_to_end(key)
        while len(self._reaped) > REAPED_MEMORY:
            self._reaped.popitem(last=False)

    async def close_all(self) -> None:
        """Close every session at once: each may remove a sandbox, and a stopping server has a deadline."""
        async with anyio.create_task_group() as group:
            for key in list(self._entries):
                group.start_soon(self.close, key)

    async def reap_forever(self, interval_s: float) -> None:
        while True:
            await anyio.sleep(interval_s)
            await self.reap_idle()
