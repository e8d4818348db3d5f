"""Per-session state in one place: create on first use, touch on each call, reap when idle or on shutdown.

Sessions are bounded per owner (the API key a call is made for, `toolkit.wire`): at its own limit an owner's
new session takes the place of that owner's least recently used idle one, so one key's burst of sessions
never costs another key its state. The server's limit stays as a last resort, and it refuses a new session
rather than evicting anyone's. A session whose state went (evicted, reaped after idle, or lost with the replica
that held it) is told once, on its next call, in words that say which. With a `Keeper` (snapshots), a session
is saved before eviction, idle reaping or the server's stop takes it, or as a drain hands it over to another
replica, and brought back on its next call; where the keeper asks for it, it is also saved in the background a
few seconds after a call changed it (`toolkit.snapshots.autosave`), so a replica killed outright loses only
those seconds."""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Generic, Protocol, TypeVar

import anyio
import structlog

from toolkit.snapshots.autosave import Autosave
from toolkit.snapshots.keeper import Taken
from toolkit.wire import ANONYMOUS

log = structlog.get_logger(__name__)


class SessionState(Protocol):
    async def aclose(self) -> None: ...


S = TypeVar("S", bound=SessionState)


class Keeper(Protocol):
    """Saves a session's state as it goes and restores it into the next (`toolkit.snapshots.keeper`)."""

    def saves(self, state: object) -> bool: ...
    async def keep(self, key: str, owner: str, state: object, trigger: str) -> str | None: ...
    async def take(self, key: str, owner: str, state: object, trigger: str) -> Taken | str: ...
    async def put(self, taken: Taken) -> str | None: ...
    async def bring_back(self, key: str, owner: str, state: object) -> tuple[str | None, str | None]: ...


class TooManySessions(Exception):
    """A new session was refused: its owner holds its limit, every one busy in a call, or the server is full."""


class SessionGone(Exception):
    """The session must exist already (it is named by a handle) but does not."""


@dataclass
class _Entry(Generic[S]):
    state: S
    owner: str
    last_used: float = field(default_factory=time.monotonic)
    started: float = field(default_factory=time.monotonic)
    busy: int = 0
    saved_at: float | None = None  # wall clock of its last background snapshot (for the operator's listing)
    reset: str | None = None  # why the state this one replaces went (evicted, reaped, a lost replica): told once
    restored: str | None = None  # the notice of a snapshot this state was restored from: told once
    unsaved: str | None = None  # why its background save failed, until told (once for each new reason)
    told_unsaved: str | None = None


@dataclass(frozen=True)
class Held:
    """One session as the operator's listing shows it (`SessionRegistry.listing`)."""

    key: str
    owner: str
    idle_s: float
    age_s: float
    busy: bool
    saved_at: float | None
    state: object


REAPED_MEMORY = 4096
"""How many gone session keys are remembered, so their next call can say why the state went."""
LOST_WITH_REPLICA = "lost with its replica (the server that held it shut down)"


class _Gone(OrderedDict[str, str]):
    """Key -> why its state went (evicted, reaped, lost), oldest first: the last `REAPED_MEMORY` keys."""

    def remember(self, key: str, why: str) -> None:
        self[key] = why
        self.move_to_end(key)
        while len(self) > REAPED_MEMORY:
            self.popitem(last=False)


def idle_words(idle_s: float) -> str:
    if idle_s < 60:
        return f"{idle_s:.0f} seconds"
    return f"{idle_s / 60:.0f} minutes"


class _Notices(Generic[S]):
    """What a session's next call is told once, each read off its entry: a reset, a restore, a failed save."""

    _entries: dict[str, _Entry[S]]

    def take_reset(self, key: str) -> str | None:
        """Why the session's previous state is gone (evicted, reaped after idle, lost with its replica), when
        the state it now has replaces one; told only once."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        reason, entry.reset = entry.reset, None
        return reason

    def take_restored(self, key: str) -> str | None:
        """The notice of the snapshot the session's state was restored from; told only once."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        notice, entry.restored = entry.restored, None
        return notice

    def take_unsaved(self, key: str) -> str | None:
        """Why the session's background save failed (it runs on, unsaved); told once for each new reason."""
        entry = self._entries.get(key)
        if entry is None or entry.unsaved is None:
            return None
        entry.told_unsaved, entry.unsaved = entry.unsaved, None
        return entry.told_unsaved


class _Census(Generic[S]):
    """The sessions held, as an operator lists them (`toolkit.admin`)."""

    _entries: dict[str, _Entry[S]]

    def listing(self) -> list[Held]:
        """Every session held now, by key (the operator's view: `toolkit.admin`), with no state read from it."""
        now = time.monotonic()
        return [
            Held(key, e.owner, now - e.last_used, now - e.started, e.busy > 0, e.saved_at, e.state)
            for key, e in sorted(self._entries.items())
        ]

    def owner_of(self, key: str) -> str | None:
        """Whose session `key` is, while it is held."""
        entry = self._entries.get(key)
        return entry.owner if entry is not None else None


class SessionRegistry(_Notices[S], _Census[S]):
    """Maps a session key to its state; creation is serialized per key so one key never gets two states."""

    def __init__(
        self,
        factory: Callable[[str], Awaitable[S]],
        *,
        ttl_s: float,
        max_sessions: int,
        max_per_owner: int | None = None,
    ) -> None:
        self.factory = factory
        self._ttl_s = ttl_s
        self._max = max_sessions
        self._per_owner = min(max_per_owner or max_sessions, max_sessions)
        self._entries: dict[str, _Entry[S]] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._gone = _Gone()
        self._creating: Counter[str] = Counter()  # owner -> sessions being made: they count against the limits
        self.on_change: Callable[[int], None] = lambda n: None
        self.keeper: Keeper | None = None
        self._unsaved: set[str] = set()  # keys a hand-over could not save: not tried again on every change
        self.autosave: Autosave | None = None
        """Saves sessions in the background after calls (`save_in_background`), with a keeper."""

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    async def acquire(
        self,
        key: str,
        *,
        owner: str = ANONYMOUS,
        create: bool = True,
        restore: bool = True,
        factory: Callable[[str], Awaitable[S]] | None = None,
    ) -> S:
        """Return the session's state, creating it for `owner` on first use (by `factory`, else the registry's;
        or raising SessionGone where `create` is False), and mark it busy until `release`. `restore` False: the
        key can have no snapshot (a one-call session, a handle just minted), so a new state skips the lookup."""
        lock = self._locks.setdefault(key, anyio.Lock())
        try:
            async with lock:
                entry = self._entries.get(key) or await self._create(key, owner, create, restore, factory)
                entry.busy += 1
                entry.last_used = time.monotonic()
                return entry.state
        finally:  # a key refused (or whose start failed) keeps no lock: refusals must not grow the registry
            if key not in self._entries and self._locks.get(key) is lock and not lock.statistics().tasks_waiting:
                del self._locks[key]

    async def _create(
        self, key: str, owner: str, create: bool, restore: bool, factory: Callable[[str], Awaitable[S]] | None
    ) -> _Entry[S]:
        if not create:
            raise SessionGone(key)
        await self._make_room(owner)
        self._creating[owner] += 1  # no await since the room was made: nobody took it meanwhile
        try:
            entry = _Entry(await (factory or self.factory)(key), owner, reset=self._gone.pop(key, None))
            if restore:
                await self._bring_back(key, entry)
        finally:
            self._creating[owner] -= 1
            if not self._creating[owner]:
                del self._creating[owner]
        self._entries[key] = entry
        self.on_change(len(self._entries))
        log.info("session.created", session_id=key, owner=owner)
        return entry

    async def _make_room(self, owner: str) -> None:
        """Room for one more session of `owner`: at its own limit its least recently used idle session goes; at
        the server's limit the new session is refused, for another owner's session is never taken."""
        while self._held_by(owner) >= self._per_owner:
            if not await self._evict_oldest_idle(owner):
                raise TooManySessions(
                    f"this caller holds its limit of {self._per_owner} sessions on this server, all of them busy "
                    "in a call; end one with cleanup_session or wait for one to finish"
                )
        if len(self._entries) + self._creating.total() >= self._max:
            raise TooManySessions(
                f"this tool server is full: it holds its limit of {self._max} sessions (of all callers) and takes "
                "no new one until some end; try again later"
            )

    async def _bring_back(self, key: str, entry: _Entry[S]) -> None:
        """Restore the session's snapshot, if the keeper has one, into its new state (closed if this fails)."""
        if self.keeper is None:
            return
        try:
            entry.restored, refused = await self.keeper.bring_back(key, entry.owner, entry.state)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await entry.state.aclose()
            raise
        if entry.restored is not None:
            entry.reset = None
        elif refused is not None:
            entry.reset = f"{entry.reset or 'lost'}; its snapshot was refused ({refused})"

    def _held_by(self, owner: str) -> int:
        return self._creating[owner] + sum(e.owner == owner for e in self._entries.values())

    def gone_reason(self, key: str) -> str | None:
        """Why a session that is not held any more went (evicted, reaped after idle, lost with its replica);
        None when it was ended on purpose, never existed, or is forgotten."""
        return self._gone.get(key)

    def moved_here(self, key: str, why: str = LOST_WITH_REPLICA) -> None:
        """`key` was held by a replica that went away (the gateway says so): its first state here is a reset,
        unless a snapshot restores it."""
        if key not in self._entries:
            self._gone.remember(key, why)

    def release(self, key: str, *, changed: bool = True) -> None:
        """The call is over; one that `changed` the session arms its background save (with `autosave`)."""
        entry = self._entries.get(key)
        if entry is None:
            return
        entry.busy -= 1
        entry.last_used = time.monotonic()
        if changed and self.autosave is not None and self.keeper is not None and self.keeper.saves(entry.state):
            self.autosave.changed(key)

    async def save_in_background(self, key: str) -> None:
        """The background save (`Autosave`): the state is taken out of its sandbox holding the session's key with
        no call running, so no call starts or changes it midway; the store write runs after, while calls go on.
        A session busy in a call is skipped: its release arms the next save."""
        lock, keeper = self._locks.get(key), self.keeper
        if lock is None or keeper is None:
            return
        async with lock:
            entry = self._entries.get(key)
            if entry is None or entry.busy > 0:
                return
            taken = await keeper.take(key, entry.owner, entry.state, "background")
        why = taken if isinstance(taken, str) else await keeper.put(taken)
        if why is None:
            entry.unsaved = entry.told_unsaved = None
            entry.saved_at = time.time()
        elif why != entry.told_unsaved:
            entry.unsaved = why

    async def replace(self, key: str, state: S) -> None:
        """Swap a session's state (after its sandbox died); the old state is closed."""
        entry = self._entries.get(key)
        if entry is None:
            return
        old, entry.state = entry.state, state
        with anyio.CancelScope(shield=True):
            await old.aclose()

    async def close(self, key: str) -> bool:
        """Free the session (a deliberate end: its next call gets no reset notice); True when there was one. Its
        background save is stopped first: whatever follows (its snapshot deleted) lands after that save."""
        self._gone.pop(key, None)
        self._unsaved.discard(key)
        entry = self._entries.pop(key, None)
        self._locks.pop(key, None)
        if self.autosave is not None:
            await self.autosave.settle(key)
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
            if (entry := self._entries.get(key)) is not None and entry.busy <= 0:  # not taken by a call meanwhile
                why = f"reaped after {idle_words(now - entry.last_used)} idle"
                await self._end(key, "session.reaped", why, "reap")
        return len(idle)

    async def _evict_oldest_idle(self, owner: str) -> bool:
        """Make room for `owner` by ending its own idle session used longest ago; False when all are busy."""
        idle = [(e.last_used, k) for k, e in self._entries.items() if e.owner == owner and e.busy <= 0]
        if not idle:
            return False
        words = f"evicted (this owner's session limit of {self._per_owner} on this server)"
        await self._end(min(idle)[1], "session.evicted", words, "evict")
        return True

    async def _end(self, key: str, event: str, why: str, trigger: str) -> None:
        """Close a session its caller did not end, remembering why so its next call hears of it."""
        entry = self._entries[key]
        idle_s = round(time.monotonic() - entry.last_used, 1)
        log.info(event, session_id=key, owner=entry.owner, idle_s=idle_s, sessions=len(self._entries))
        await self._save_and_close(key, why, trigger)

    async def _save_and_close(
        self, key: str, why: str | None, trigger: str = "drain", *, unsaved_stays: bool = False
    ) -> None:
        """Snapshot an idle session (with a keeper) and close it, holding its key so a call for it meanwhile waits,
        then starts from the snapshot; `why` (None: the server is stopping) is what its next call hears when no
        snapshot brings it back. A session a call took first is left be, unless the server is stopping: then it
        is closed unsaved, for its state is mid-change. `unsaved_stays`: one that could not be saved is kept."""
        async with self._locks.setdefault(key, anyio.Lock()):
            entry = self._entries.get(key)
            if entry is None or (entry.busy > 0 and why is not None):
                return
            unsaved = None
            if self.keeper is not None and entry.busy <= 0:
                with anyio.CancelScope(shield=True):
                    if self.autosave is not None:
                        await self.autosave.settle(key)  # its write must not land after this newer one
                    unsaved = await self.keeper.keep(key, entry.owner, entry.state, trigger)
            if unsaved is not None and unsaved_stays:
                self._unsaved.add(key)
                return
            await self.close(key)
            if why is not None:
                self._gone.remember(key, why if unsaved is None else f"{why}; it could not be saved ({unsaved})")

    async def close_all(self) -> None:
        """Close every session at once (saving each first, with a keeper): each may remove a sandbox, and a
        stopping server has a deadline."""
        async with anyio.create_task_group() as group:
            for key in list(self._entries):
                group.start_soon(self._save_and_close, key, None)

    async def hand_over(self) -> int:
        """Save each idle session and let it go (a draining server's, whose next call another replica restores);
        one that could not be saved stays. Returns how many went. Only for a keeper that saves these states."""
        before = len(self._entries)
        async with anyio.create_task_group() as group:
            for key, entry in list(self._entries.items()):
                if entry.busy <= 0 and key not in self._unsaved:
                    group.start_soon(partial(self._save_and_close, key, LOST_WITH_REPLICA, unsaved_stays=True))
        return max(before - len(self._entries), 0)

    async def reap_forever(self, interval_s: float) -> None:
        while True:
            await anyio.sleep(interval_s)
            await self.reap_idle()
