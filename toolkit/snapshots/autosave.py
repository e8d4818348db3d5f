"""Background snapshots: a session a call changed is saved a few seconds later, off any call's path.

Eviction, idle reaping and a drain save a session as it goes, but a SIGKILLed replica or a lost node takes every
session with it unsaved. So after a call that changed a session, a save is armed: it runs when the session has
been quiet for `every_s` (a burst of calls is saved once, after it), and no later than `CEILING` times that
after its first unsaved change (a session that never pauses is still saved). At most one save per session is in
flight; a call that changes the session meanwhile arms the next. What the save does (`Save`) is the registry's:
it reads the state while no call runs and writes it after.

`settle` is what makes a save safe to race with a session's end: it disarms the session's save and cancels the
one in flight, returning only once that has stopped, so whatever comes next (eviction's own save, or
`cleanup_session` deleting the snapshot) lands after it, and a late background save never resurrects a session
that was ended on purpose.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup

Save = Callable[[str], Awaitable[None]]
"""Saves the session named by its key, if it is still held and idle; never raises but for cancellation."""

CEILING = 3.0
"""A session's unsaved change waits at most this many times `every_s` for its save, however busy the session."""


@dataclass(slots=True)
class _Armed:
    due: float
    latest: float
    """The ceiling: re-arming never moves `due` past it."""


@dataclass(slots=True)
class _Running:
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)


class Autosave:
    """Debounced background saves of changed sessions, run by `run` (a loop of the server's lifespan)."""

    def __init__(self, every_s: float, save: Save) -> None:
        self.every_s = every_s
        self._save = save
        self._armed: dict[str, _Armed] = {}
        self._running: dict[str, _Running] = {}
        self._wake = anyio.Event()
        self._deadline = math.inf
        """When the loop wakes next by itself: a save due earlier must wake it, one due later need not."""

    def changed(self, key: str) -> None:
        """A call changed the session: (re)arm its save `every_s` from now, within its ceiling."""
        now = time.monotonic()
        armed = self._armed.get(key)
        if armed is None:
            armed = self._armed[key] = _Armed(now + self.every_s, now + CEILING * self.every_s)
        armed.due = min(now + self.every_s, armed.latest)
        if armed.due < self._deadline:  # rare: most calls re-arm a save due after one the loop waits for
            self._wake.set()

    def pending(self, key: str) -> bool:
        """Whether the session has a save armed or in flight."""
        return key in self._armed or key in self._running

    async def settle(self, key: str) -> None:
        """Disarm the session's save and stop the one in flight; returns once it has stopped."""
        self._armed.pop(key, None)
        running = self._running.get(key)
        if running is not None:
            running.scope.cancel()
            with anyio.CancelScope(shield=True):
                await running.done.wait()

    async def run(self) -> None:
        """Start each save as it falls due (one per session at a time) until cancelled."""
        async with anyio.create_task_group() as tg:
            while True:
                self._wake = anyio.Event()
                self._start_due(tg, time.monotonic())
                wait = self._next_wait()
                self._deadline = time.monotonic() + wait
                with anyio.move_on_after(wait):
                    await self._wake.wait()

    def _start_due(self, tg: TaskGroup, now: float) -> None:
        due = [key for key, armed in self._armed.items() if armed.due <= now and key not in self._running]
        for key in due:
            del self._armed[key]
            running = self._running[key] = _Running()  # registered before it starts: `settle` can stop it now
            tg.start_soon(self._one, key, running, name=f"autosave {key}")

    def _next_wait(self) -> float:
        waiting = [armed.due for key, armed in self._armed.items() if key not in self._running]
        return max(0.0, min(waiting, default=math.inf) - time.monotonic())

    async def _one(self, key: str, running: _Running) -> None:
        try:
            with running.scope:
                await self._save(key)
        finally:
            del self._running[key]
            running.done.set()
            self._wake.set()  # a change made during this save armed the next one: it may be due now
