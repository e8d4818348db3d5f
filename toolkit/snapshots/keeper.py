"""What the session registry calls to save a session's state as it goes and to bring it back on its next call.

The state's own `snapshot`/`restore` run inside its sandbox; this side only moves the opaque bytes between the
sandbox and the store, and words what happened for the model: a restore notice, or why none was possible. A save
is two steps, `take` (in the sandbox, while no call may run) and `put` (to the store, while calls go on), so a
background save holds the session only as long as the sandbox works; `keep` does both. Each step tells its
`SnapshotObserver` (the server's metrics) what it took, restored or failed to, and why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import anyio
import structlog

from toolkit.snapshots.base import Snapshot, SnapshotId, SnapshotRefused, SnapshotStore

log = structlog.get_logger(__name__)

NEVER_RESTORED = "running processes, open files"
SWEEP_INTERVAL_S = 3600.0
"""How often expired snapshots are deleted (a TTL is days long: an hour late is no matter)."""
TRIGGERS = ("evict", "reap", "drain", "background")
"""What takes a snapshot; a restore is counted by what took the snapshot it restored."""


@runtime_checkable
class Snapshottable(Protocol):
    async def snapshot(self) -> tuple[bytes, list[str]]: ...
    async def restore(self, payload: bytes) -> list[str]: ...


_SNAPSHOTTABLE: dict[type, bool] = {}


def snapshottable(kind: type) -> bool:
    """Whether states of `kind` can be snapshotted, checked once per type: a protocol's isinstance check costs
    about 25 us, and every call's release asks."""
    known = _SNAPSHOTTABLE.get(kind)
    if known is None:
        known = _SNAPSHOTTABLE[kind] = issubclass(kind, Snapshottable)
    return known


class SnapshotObserver(Protocol):
    """Told each snapshot taken and restored (what took it, its bytes, its seconds) and each failure (`save` or
    `restore`, and the reason: a `SnapshotRefused` reason, `sandbox` or `store`)."""

    def taken(self, trigger: str, size: int, seconds: float) -> None: ...
    def restored(self, trigger: str, size: int, seconds: float) -> None: ...
    def failed(self, op: str, reason: str) -> None: ...


class Unobserved:
    """The observer of a keeper no server watches (a bench, a test)."""

    def taken(self, trigger: str, size: int, seconds: float) -> None:
        return None

    def restored(self, trigger: str, size: int, seconds: float) -> None:
        return None

    def failed(self, op: str, reason: str) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Taken:
    """A snapshot out of its sandbox, not yet stored; `started` is when taking it began (`perf_counter`)."""

    snap: Snapshot
    started: float


class SnapshotKeeper:
    """Saves and restores sessions of one tool namespace in `store`; `every_s` > 0 also saves them in the
    background that long after a call changed them (`toolkit.snapshots.autosave`)."""

    def __init__(self, store: SnapshotStore, namespace: str, *, every_s: float = 0.0) -> None:
        self.store = store
        self.namespace = namespace
        self.every_s = every_s
        self.observer: SnapshotObserver = Unobserved()

    def _id(self, key: str, owner: str) -> SnapshotId:
        return SnapshotId(self.namespace, owner, key)

    def saves(self, state: object) -> bool:
        """Whether this keeper saves `state` at all (a store is configured and the state can be snapshotted)."""
        return self.store.enabled and snapshottable(type(state))

    async def keep(self, key: str, owner: str, state: object, trigger: str) -> str | None:
        """Save the session before its sandbox goes; why it was not saved (oversized, the sandbox could not pickle
        it), for its next call to hear, or None."""
        if not self.saves(state):
            return None
        taken = await self.take(key, owner, state, trigger)
        return taken if isinstance(taken, str) else await self.put(taken)

    async def take(self, key: str, owner: str, state: object, trigger: str) -> Taken | str:
        """The session's state out of its sandbox (`saves(state)` must hold), or why the sandbox could not."""
        assert isinstance(state, Snapshottable)
        started = time.perf_counter()
        try:
            payload, unsaved = await state.snapshot()
        except Exception as exc:  # the sandbox could not pickle, or died
            log.warning("snapshot.failed", session_id=key, trigger=trigger, error=f"{type(exc).__name__}: {exc}")
            self.observer.failed("save", "sandbox")
            return f"the sandbox could not snapshot it ({type(exc).__name__})"
        snap = Snapshot(self._id(key, owner), payload, unsaved=tuple(unsaved), trigger=trigger)
        return Taken(snap, started)

    async def put(self, taken: Taken) -> str | None:
        """Store a taken snapshot, replacing the session's last one; why it was not stored, or None."""
        snap, key = taken.snap, taken.snap.id.key
        try:
            await self.store.save(snap)
        except SnapshotRefused as exc:
            log.warning("snapshot.refused", session_id=key, trigger=snap.trigger, reason=exc.reason, error=str(exc))
            self.observer.failed("save", exc.reason)
            return str(exc)
        except Exception as exc:  # the store is down or full
            log.warning("snapshot.failed", session_id=key, trigger=snap.trigger, error=f"{type(exc).__name__}: {exc}")
            self.observer.failed("save", "store")
            return f"the snapshot store could not keep it ({type(exc).__name__})"
        seconds = time.perf_counter() - taken.started
        self.observer.taken(snap.trigger, len(snap.payload), seconds)
        log.info(
            "snapshot.saved",
            session_id=key,
            trigger=snap.trigger,
            bytes=len(snap.payload),
            unsaved=list(snap.unsaved),
            ms=round(seconds * 1000, 1),
        )
        return None

    async def bring_back(self, key: str, owner: str, state: object) -> tuple[str | None, str | None]:
        """Restore the session's snapshot into its new `state`: (the notice line, None) when restored, (None,
        why not) when a snapshot was there but refused, (None, None) when there was none."""
        if not self.saves(state):
            return None, None
        assert isinstance(state, Snapshottable)
        started = time.perf_counter()
        try:
            snap = await self.store.load(self._id(key, owner))
        except SnapshotRefused as exc:
            log.warning("snapshot.refused", session_id=key, reason=exc.reason, error=str(exc))
            self.observer.failed("restore", exc.reason)
            return None, str(exc)
        except Exception as exc:  # the store is down
            log.warning("snapshot.failed", session_id=key, error=f"{type(exc).__name__}: {exc}")
            self.observer.failed("restore", "store")
            return None, f"the snapshot store could not be read ({type(exc).__name__})"
        if snap is None:
            return None, None
        try:
            missing = await state.restore(snap.payload)
        except Exception as exc:  # the sandbox could not load it
            log.warning("snapshot.failed", session_id=key, error=f"{type(exc).__name__}: {exc}")
            self.observer.failed("restore", "sandbox")
            return None, f"the sandbox could not load it ({type(exc).__name__})"
        self.observer.restored(snap.trigger, len(snap.payload), time.perf_counter() - started)
        log.info("snapshot.restored", session_id=key, trigger=snap.trigger, bytes=len(snap.payload))
        when = time.strftime("%H:%M:%S", time.gmtime(snap.taken_at))
        lost = ", ".join([*snap.unsaved, *missing, NEVER_RESTORED])
        return f"[restored from a snapshot of {when} UTC; not restored: {lost}]\n", None

    async def has(self, key: str, owner: str) -> bool:
        """Whether the session has a snapshot to restore (not yet checked: restoring it may still refuse it)."""
        return self.store.enabled and await self.store.holds(self._id(key, owner))

    async def forget(self, key: str, owner: str) -> None:
        """The session was ended on purpose: its snapshot goes too."""
        if self.store.enabled:
            await self.store.delete(self._id(key, owner))

    async def sweep_forever(self, interval_s: float = SWEEP_INTERVAL_S) -> None:
        """Delete expired snapshots, such as those of sessions never called again (a dir store keeps them
        otherwise; Redis expires its own). A failed sweep is logged and tried again: it must not stop the server."""
        while True:
            try:
                removed = await self.store.sweep()
            except Exception as exc:
                log.warning("snapshot.sweep_failed", error=f"{type(exc).__name__}: {exc}")
            else:
                log.info("snapshot.swept", removed=removed)
            await anyio.sleep(interval_s)
